"""One prompt's ``/generate`` request: checking its JSON body, its state while it runs, and its answer.

The body and the answer follow SGLang's native API (`generate_body` splits what a client sends,
text or batches included, into one such body per prompt):

    {"input_ids": [int], "sampling_params": {...}, "return_logprob": bool, "rid": str,
     "return_text_in_logprobs": bool, "logprob_start_len": int, "top_logprobs_num": int}
    -> {"text": str, "output_ids": [int], "meta_info": {"id", "finish_reason", "prompt_tokens",
        "completion_tokens", "weight_version", "output_token_logprobs" (with return_logprob),
        "input_token_logprobs" (with return_logprob and logprob_start_len >= 0: the prompt's
        tokens from that position, the first token's log-prob null),
        "output_top_logprobs", "input_top_logprobs" (with return_logprob and top_logprobs_num > 0:
        `top_logprobs`),
        "top_p_token_ids", "top_p_token_offsets" (with custom_params.return_top_p_token_ids),
        "routed_experts" (with return_routed_experts: `routing`)}}

Top-p replay answers as SGLang with slime's top-p patch does: the output tokens' nuclei
concatenated, and completion_tokens + 1 offsets into them, each base64 of int32
(``slime_core.engine.encode_int32s``; `sampling` says what a nucleus holds).

With ``sampling_params.n`` > 1 (SGLang's parallel sampling) the answer is a list of n such
objects, one per sample of the prompt (a GRPO group in one request).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch

from slime_core.engine import TOP_P_REPLAY_PARAM, encode_int32s, parallel_sample_seed
from slime_sglang.cpu_engine.sampling import SamplingParams

TOP_LEVEL_KEYS = (
    "input_ids",
    "sampling_params",
    "return_logprob",
    "return_text_in_logprobs",
    "rid",
    "logprob_start_len",
    "top_logprobs_num",
    "return_routed_experts",
)
#: ``sampling_params`` keys: SGLang's names of `SamplingParams`' fields, and custom_params ...
SAMPLING_KEYS = tuple(f.name for f in fields(SamplingParams) if f.name != "return_top_p_token_ids") + ("custom_params",)
#: ... whose only key the CPU engine knows asks for top-p replay.
CUSTOM_PARAMS = (TOP_P_REPLAY_PARAM,)


class BadRequest(ValueError):
    """A request the engine refuses (HTTP 400); the message says what is wrong and how to fix it."""


@dataclass(eq=False)
class GenerateRequest:
    """A request from arrival to answer. The scheduler thread alone changes it once submitted."""

    rid: str
    input_ids: list[int]
    params: SamplingParams
    return_logprob: bool
    return_text_in_logprobs: bool = False  # third item of each output_token_logprobs entry: the token's text
    logprob_start_len: int = -1  # with return_logprob, the prompt's log-probs from this position (-1: none)
    top_logprobs_num: int = 0  # with return_logprob, the k most likely tokens at each position too (`top_logprobs`)
    generator: torch.Generator | None = None  # set for requests with a sampling_seed
    images: Any = None  # vision.PromptImages of the prompt's image_data (vision-language models), or None
    position_offset: int = 0  # added to decode positions: an image spans fewer positions than tokens (vision)
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)  # one per output token
    output_nuclei: list[list[int]] = field(default_factory=list)  # one per output token, with top-p replay
    return_routed_experts: bool = False  # answer each fed token's routed experts (`routing`)
    routed_experts: list[list[int]] = field(default_factory=list)  # per fed token: num_layers × top_k ids
    finish_reason: dict | None = None  # set when the request is done
    on_done: Callable[[dict | Exception], None] | None = None  # receives the answer (or the failure)

    def abort(self, message: str) -> None:
        self.finish_reason = {"type": "abort", "message": message}


def parse_generate_copies(body, vocab_size: int, context_length: int) -> list[GenerateRequest]:
    """The requests of a ``/generate`` body: ``sampling_params.n`` copies of one prompt
    (SGLang's parallel sampling; default 1), or ``BadRequest``. Copy i of a seeded body draws
    with ``parallel_sample_seed(seed, i)``; copies get ids ``rid-i`` when a ``rid`` is given."""
    if not isinstance(body, dict) or not isinstance(body.get("sampling_params") or {}, dict):
        return [parse_generate(body, vocab_size, context_length)]  # which says what is wrong
    sampling = dict(body.get("sampling_params") or {})
    n = _integer(sampling, "n", 1)
    if n < 1:
        raise BadRequest(f"sampling_params.n must be at least 1 (the number of samples of the prompt), got {n}")
    sampling.pop("n", None)
    first = parse_generate({**body, "sampling_params": sampling}, vocab_size, context_length)
    if n == 1:
        return [first]
    rid, seed = body.get("rid"), first.params.sampling_seed
    return [
        parse_generate(
            {
                **body,
                "rid": f"{rid}-{i}" if rid else None,
                "sampling_params": {
                    **sampling,
                    "sampling_seed": None if seed is None else parallel_sample_seed(seed, i),
                },
            },
            vocab_size,
            context_length,
        )
        for i in range(n)
    ]


def parse_generate(body, vocab_size: int, context_length: int) -> GenerateRequest:
    """A request from a ``/generate`` JSON body, or ``BadRequest`` saying what to fix.

    ``max_new_tokens`` is capped so that prompt and output fit in ``context_length``, as
    SGLang does; a prompt that does not fit by itself is refused.
    """
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object with input_ids and sampling_params")
    refuse_unknown(body, TOP_LEVEL_KEYS, "request field")
    input_ids = _prompt(body.get("input_ids"), vocab_size, context_length)
    params = parse_sampling_params(body.get("sampling_params") or {}, vocab_size)
    params = replace(params, max_new_tokens=min(params.max_new_tokens, context_length - len(input_ids)))
    logprob_start_len = _integer(body, "logprob_start_len", -1)
    if not -1 <= logprob_start_len < len(input_ids):
        raise BadRequest(
            f"logprob_start_len must be -1 (no prompt log-probs) or a position in the prompt "
            f"[0, {len(input_ids)}), got {logprob_start_len}"
        )
    top_logprobs_num = _integer(body, "top_logprobs_num", 0)
    if top_logprobs_num < 0:
        raise BadRequest(
            f"top_logprobs_num must be >= 0 (the most likely tokens to return per position), got {top_logprobs_num}"
        )
    rid = body.get("rid")
    if rid is not None and not isinstance(rid, str):
        raise BadRequest("rid must be a string (or left out for a generated id)")
    return GenerateRequest(
        rid=rid or uuid.uuid4().hex,
        input_ids=input_ids,
        params=params,
        return_logprob=_boolean(body, "return_logprob", False),
        return_text_in_logprobs=_boolean(body, "return_text_in_logprobs", False),
        logprob_start_len=logprob_start_len,
        top_logprobs_num=top_logprobs_num,
        return_routed_experts=_boolean(body, "return_routed_experts", False),
        generator=None if params.sampling_seed is None else torch.Generator().manual_seed(params.sampling_seed),
    )


def parse_sampling_params(raw, vocab_size: int) -> SamplingParams:
    """``SamplingParams`` from the ``sampling_params`` object (null means the default), or ``BadRequest``."""
    if not isinstance(raw, dict):
        raise BadRequest("sampling_params must be a JSON object")
    refuse_unknown(raw, SAMPLING_KEYS, "sampling param")
    custom = raw.get("custom_params") or {}
    if not isinstance(custom, dict):
        raise BadRequest("custom_params must be a JSON object (or null)")
    refuse_unknown(custom, CUSTOM_PARAMS, "custom param")
    defaults = SamplingParams()
    temperature = _number(raw, "temperature", defaults.temperature)
    top_p = _number(raw, "top_p", defaults.top_p)
    top_k = _integer(raw, "top_k", defaults.top_k)
    max_new_tokens = _integer(raw, "max_new_tokens", defaults.max_new_tokens)
    if temperature < 0:
        raise BadRequest(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if not 0 < top_p <= 1:
        raise BadRequest(f"top_p must be in (0, 1], got {top_p}")
    if top_k == 0 or top_k < -1:
        raise BadRequest(f"top_k must be -1 (off) or at least 1, got {top_k}")
    if max_new_tokens < 0:
        raise BadRequest(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    min_new_tokens = _integer(raw, "min_new_tokens", defaults.min_new_tokens)
    if min_new_tokens < 0:
        raise BadRequest(f"min_new_tokens must be >= 0, got {min_new_tokens}")
    seed = raw.get("sampling_seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BadRequest(f"sampling_seed must be an integer or null, got {seed!r}")
    return SamplingParams(
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        max_new_tokens=max_new_tokens,
        min_new_tokens=min_new_tokens,
        stop=_stop_strings(raw.get("stop")),
        stop_token_ids=frozenset(_token_ids(raw.get("stop_token_ids") or [], "stop_token_ids", vocab_size)),
        sampling_seed=seed,
        ignore_eos=_boolean(raw, "ignore_eos", defaults.ignore_eos),
        skip_special_tokens=_boolean(raw, "skip_special_tokens", defaults.skip_special_tokens),
        no_stop_trim=_boolean(raw, "no_stop_trim", defaults.no_stop_trim),
        return_top_p_token_ids=_boolean(custom, TOP_P_REPLAY_PARAM, defaults.return_top_p_token_ids),
    )


def answer(request: GenerateRequest, text: str, weight_version: str, token_texts: list[str] | None = None) -> dict:
    """The ``/generate`` response body of a finished request (``token_texts``: one per output
    token, for ``return_text_in_logprobs``)."""
    meta = {
        "id": request.rid,
        "finish_reason": request.finish_reason,
        "prompt_tokens": len(request.input_ids),
        "completion_tokens": len(request.output_ids),
        "weight_version": weight_version,
    }
    if request.return_logprob:
        texts = token_texts or [None] * len(request.output_ids)
        meta["output_token_logprobs"] = [
            list(entry) for entry in zip(request.output_logprobs, request.output_ids, texts)
        ]
    if request.params.return_top_p_token_ids:
        offsets = [0]
        for nucleus in request.output_nuclei:
            offsets.append(offsets[-1] + len(nucleus))
        meta["top_p_token_ids"] = encode_int32s([token for nucleus in request.output_nuclei for token in nucleus])
        meta["top_p_token_offsets"] = encode_int32s(offsets)
    if request.return_routed_experts:
        meta["routed_experts"] = encode_int32s([i for row in request.routed_experts for i in row])
    return {"text": text, "output_ids": list(request.output_ids), "meta_info": meta}


def refuse_unknown(raw: dict, known, what: str) -> None:
    """``BadRequest`` naming the keys of ``raw`` that are not ``known`` (``what``: e.g. "field")."""
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise BadRequest(
            f"unknown {what}{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"the CPU engine accepts: {', '.join(known)}"
        )


def _prompt(value, vocab_size: int, context_length: int) -> list[int]:
    input_ids = _token_ids(value, "input_ids", vocab_size)
    if not input_ids:
        raise BadRequest("input_ids must be a non-empty list of token ids (or send the prompt as text)")
    if len(input_ids) >= context_length:
        raise BadRequest(
            f"the prompt has {len(input_ids)} tokens but the context length is {context_length}; "
            "shorten the prompt or start the engine with a larger --context-length"
        )
    return input_ids


def _token_ids(value, name: str, vocab_size: int) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        if value is None and name == "input_ids":
            raise BadRequest("input_ids is missing: send the prompt as text, or as a list of token ids")
        raise BadRequest(f"{name} must be a list of integer token ids (or a list of such lists: a batch)")
    outside = [t for t in value if not 0 <= t < vocab_size]
    if outside:
        raise BadRequest(
            f"{name} has ids outside the vocabulary [0, {vocab_size}): {outside[:5]}; "
            "tokenize with the tokenizer of the model this engine serves"
        )
    return value


def _stop_strings(value) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise BadRequest("stop must be a non-empty string, a list of them, or null")
    return tuple(value)


def _number(raw: dict, key: str, default: float) -> float:
    value = default if raw.get(key) is None else raw[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"{key} must be a number, got {value!r}")
    return float(value)


def _integer(raw: dict, key: str, default: int) -> int:
    value = default if raw.get(key) is None else raw[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{key} must be an integer, got {value!r}")
    return value


def _boolean(raw: dict, key: str, default: bool) -> bool:
    value = default if raw.get(key) is None else raw[key]
    if not isinstance(value, bool):
        raise BadRequest(f"{key} must be true or false, got {value!r}")
    return value
