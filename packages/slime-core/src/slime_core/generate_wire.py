"""SGLang's native ``/generate`` wire format: what a client sends, and the generation calls over it.

Every router slime runs (sglang-router, slime-router's middleware front) forwards this body to
an engine's ``/generate`` and hands back the engine's answer, so every engine behind a router
speaks it: SGLang, the CPU engine, and slime-vllm's servers (which translate it to vLLM's own
route). The body:

    {"input_ids": [int], "sampling_params": {SamplingParams.to_json(), "n": int},
     "return_logprob": bool, "rid": str, "image_data": [str], "video_data": [[str]],
     "return_routed_experts": true}

The answer is one object (a list of n with ``sampling_params.n``), read by
``slime_core.engine.parse_generate``. `SGLangGenerate` holds the two generation calls of
``slime_core.engine.RolloutEngine`` over it, for the clients of slime-sglang and slime-vllm.
"""

from __future__ import annotations

from typing import Any

from slime_core.engine import EngineError, GenerateResult, SamplingParams, parse_generate


def generate_body(
    input_ids: list[int],
    sampling: SamplingParams,
    return_logprob: bool = True,
    rid: str | None = None,
    image_data: list[str] | None = None,
    n: int | None = None,
    video_data: list[list[str]] | None = None,
) -> dict[str, Any]:
    """The ``/generate`` body for ``input_ids``; ``n``: SGLang's parallel sampling (the answer is then a list)."""
    params = sampling.to_json()
    if n is not None:
        params["n"] = n
    body: dict[str, Any] = {
        "input_ids": input_ids,
        "sampling_params": params,
        "return_logprob": return_logprob,
        **sampling.request_fields(),
    }
    if image_data:
        body["image_data"] = image_data  # as SGLang's GenerateReqInput takes it
    if video_data:
        body["video_data"] = video_data  # SGLang's field; each video a list of frames (the CPU engine's format)
    if rid is not None:
        body["rid"] = rid
    return body


def parse_parallel(answers: Any, n: int, url: str) -> list[GenerateResult]:
    """The n results of a ``/generate`` asked for ``n`` samples; `EngineError` when the answer
    is not a list of n (the engine ignored ``sampling_params.n``)."""
    if not isinstance(answers, list) or len(answers) != n:
        got = f"a list of {len(answers)}" if isinstance(answers, list) else "one"
        raise EngineError(
            f"engine {url}/generate was asked for {n} samples (sampling_params.n) and answered "
            f"{got}; does it support parallel sampling? (--no-rollout-group-requests sends one "
            "request per sample)"
        )
    return [parse_generate(answer) for answer in answers]


class SGLangGenerate:
    """``generate`` and ``generate_parallel`` over ``POST {url}/generate``, for an HTTP client
    class that has ``url`` and ``_call(method, path, body)`` (the JSON answer)."""

    url: str

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        raise NotImplementedError  # the client class's

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        return_logprob: bool = True,
        rid: str | None = None,
        image_data: list[str] | None = None,
        video_data: list[list[str]] | None = None,
    ) -> GenerateResult:
        body = generate_body(input_ids, sampling, return_logprob, rid, image_data, video_data=video_data)
        return parse_generate(await self._call("POST", "/generate", body))

    async def generate_parallel(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        n: int,
        return_logprob: bool = True,
        image_data: list[str] | None = None,
        video_data: list[list[str]] | None = None,
    ) -> list[GenerateResult]:
        body = generate_body(input_ids, sampling, return_logprob, image_data=image_data, n=n, video_data=video_data)
        return parse_parallel(await self._call("POST", "/generate", body), n, self.url)
