"""SGLang's ``POST /generate`` on slime's vLLM servers, translated to vLLM's token-in, token-out generate.

Routers (sglang-router, slime-router's front) forward SGLang's ``/generate`` body
(``slime_core.generate_wire``) to each engine and hand its answer back, so a vLLM server behind
one must speak it. This route runs in vLLM's interpreter (it imports vLLM, not slime-core) and
calls the handler of vLLM's ``/inference/v1/generate`` in process (``serving_tokens``, with
``output_mode: text``):

    {"input_ids", "sampling_params": {"max_new_tokens", "temperature", "top_p", "top_k", "stop",
     "stop_token_ids", "sampling_seed", "min_new_tokens", "n"}, "return_logprob", "rid"}
    -> {"text", "output_ids", "meta_info": {"id", "finish_reason": {"type": "stop" | "length" |
        "abort"}, "prompt_tokens", "completion_tokens", "weight_version",
        "output_token_logprobs": [[log-prob, token id, null], ...] (with return_logprob)}}

With ``n`` > 1 the answer is a list of n such objects; with a seed too, vLLM seeds the copies
itself (slime's client sends a seeded group as n requests instead, see `slime_vllm.client`).
What vLLM cannot do here is refused with 400 and the reason (`REFUSED`: text prompts, streams,
images, routed experts, custom sampling parameters as top-p replay needs, ...).
"""

from typing import Any  # no postponed annotations: FastAPI reads the route's parameter type (`attach`)

#: SGLang's sampling option -> vLLM's name for it.
SAMPLING_NAMES = {
    "max_new_tokens": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "stop": "stop",
    "stop_token_ids": "stop_token_ids",
    "sampling_seed": "seed",
    "min_new_tokens": "min_tokens",
    "n": "n",
    **{name: name for name in ("min_p", "repetition_penalty", "frequency_penalty", "presence_penalty", "ignore_eos")},
}
#: Fields SGLang takes that change the answer and slime's vLLM servers cannot serve, and why, when
#: set (not one of `UNSET`). Other fields are SGLang's defaults that a router fills in (sglang-router
#: sends ``log_metrics: true``, ``model``, ...) and change nothing here.
REFUSED = {
    "text": "slime's vLLM servers take token ids (input_ids), not text",
    "stream": "slime's vLLM servers answer once, not as a stream",
    "lora_path": "per-request LoRA adapters are not served by slime's vLLM servers",
    "return_hidden_states": "vLLM does not return hidden states",
    "top_logprobs_num": "slime's vLLM servers return the sampled token's log-prob only",
    "logprob_start_len": "slime's vLLM servers return the output tokens' log-probs only",
    "image_data": "slime's vLLM servers take token ids only, not images (use the sglang rollout backend)",
    "video_data": "slime's vLLM servers take token ids only, not videos (use the sglang rollout backend)",
    "return_routed_experts": "vLLM does not return each token's routed experts (use --use-routing-replay)",
    "custom_params": "vLLM takes no custom sampling parameters; top-p replay (--rollout-top-p < 1) needs "
    "each token's nucleus back, which vLLM does not return",
}
#: A refused field's values that mean "not asked for" (SGLang's defaults: -1, 0, false, null).
UNSET = (None, False, 0, -1, "", [], {})


class BadRequest(ValueError):
    """A body this route cannot serve; the message says which field and why."""


def vllm_request(body: dict[str, Any]) -> dict[str, Any]:
    """vLLM's ``/inference/v1/generate`` body for an SGLang ``/generate`` body."""
    sampling = dict(body.get("sampling_params") or {})
    for key, value in {**body, **sampling}.items():
        if key in REFUSED and value not in UNSET:
            raise BadRequest(f"/generate: {key}={value!r}: {REFUSED[key]}")
    if not body.get("input_ids"):
        raise BadRequest("/generate: input_ids (the prompt's token ids) is missing; these servers take token ids only")
    params = {
        SAMPLING_NAMES[key]: value for key, value in sampling.items() if key in SAMPLING_NAMES and value is not None
    }
    params["top_k"] = max(int(params.get("top_k", 0)), 0)  # SGLang's -1 (off) is vLLM's 0
    params["logprobs"] = 0  # the sampled token's log-prob only
    request = {"token_ids": body["input_ids"], "sampling_params": params, "output_mode": "text"}
    if body.get("rid") is not None:
        request["request_id"] = str(body["rid"])
    return request


def sglang_answers(answer: dict[str, Any], body: dict[str, Any]) -> list[dict[str, Any]]:
    """SGLang's answer for each choice of vLLM's ``answer`` to ``body``, in choice order."""
    answers = []
    for choice in sorted(answer.get("choices", []), key=lambda choice: choice["index"]):
        ids = list(choice.get("token_ids") or [])
        spans = choice.get("weight_versions") or []
        meta: dict[str, Any] = {
            "id": body.get("rid", answer.get("request_id")),
            "finish_reason": {"type": choice.get("finish_reason") or "abort"},
            "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": len(ids),
            "weight_version": spans[-1]["version"] if spans else None,
        }
        if body.get("return_logprob"):
            content = (choice.get("logprobs") or {}).get("content") or []
            meta["output_token_logprobs"] = [[float(entry["logprob"]), id_, None] for entry, id_ in zip(content, ids)]
        answers.append({"text": choice.get("text", ""), "output_ids": ids, "meta_info": meta})
    return answers


async def generate(raw_request):
    """The route: SGLang's body in, SGLang's answer (a list with ``n`` > 1) out."""
    from fastapi.responses import JSONResponse
    from pydantic import ValidationError
    from vllm.entrypoints.scale_out.token_in_token_out.protocol import GenerateRequest, GenerateResponseBase

    body = await raw_request.json()
    try:
        request = GenerateRequest.model_validate(vllm_request(body))
    except (BadRequest, ValidationError) as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    result = await raw_request.app.state.serving_tokens.serve_tokens(request, raw_request)
    if not isinstance(result, GenerateResponseBase):  # vLLM's ErrorResponse (the request is never streamed)
        return JSONResponse(result.model_dump(), status_code=result.error.code)
    answers = sglang_answers(result.model_dump(), body)
    return JSONResponse(answers if "n" in (body.get("sampling_params") or {}) else answers[0])


def attach(app) -> None:
    """Add the route to vLLM's app."""
    from fastapi import Request

    async def route(raw_request: Request):
        return await generate(raw_request)

    app.add_api_route("/generate", route, methods=["POST"])
