"""The rollout-engine contract: what a rollout or generate function asks of an engine.

An engine turns token ids into sampled token ids with their log-probs. A rollout backend
(`slime_core.rollout_backend`) hands the rollout a `RolloutEngine` client for the router (or
for its engines in turn, without one); slime-sglang's ``EngineClient`` implements it over
SGLang's native HTTP API, a plugin's backend over its own. This module also holds what every
client and plugin shares: the sampling options, a generation's result and its JSON codec
(SGLang's ``/generate`` answer), appending a result to a `Sample`, and the engine errors that
fault tolerance tells apart (`EngineUnavailable`: the engine failed, not the request).

Top-p replay: with ``--rollout-top-p`` < 1 the rollout asks for each sampled token's nucleus
(``custom_params={"return_top_p_token_ids": true}``, `TOP_P_REPLAY_PARAM`), and the engine answers
with ``meta_info["top_p_token_ids"]`` (every output token's nucleus ids, concatenated) and
``meta_info["top_p_token_offsets"]`` (completion_tokens + 1 boundaries into them), each a JSON
list or, as SGLang with slime's top-p patch sends them, base64 of little-endian int32. The
trainer then scores log-probs over the same nucleus (``slime_core.algorithms.nucleus_keep_mask``).
"""

from __future__ import annotations

import base64
from array import array
from dataclasses import dataclass, field
from typing import Any, Protocol

from slime_core.routing_replay import routing_rows
from slime_core.sample import Sample, SampleStatus


class EngineError(RuntimeError):
    """An engine refused or failed a call; the message names the engine and the call."""


class EngineUnavailable(EngineError):
    """The engine did not answer, or answered 5xx: it (or the router's route to it) failed,
    not the request. With ``--use-fault-tolerance`` such a sample is generated again."""


@dataclass
class SamplingParams:
    """Per-request sampling options, in SGLang's names."""

    max_new_tokens: int
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = -1  # -1 = off
    stop: list[str] | None = None  # stop strings (not included in the output text)
    stop_token_ids: list[int] | None = None
    sampling_seed: int | None = None
    custom_params: dict[str, Any] | None = None  # SGLang's custom_params, e.g. {TOP_P_REPLAY_PARAM: True}
    min_new_tokens: int | None = None  # no EOS or stop token is drawn before this many new tokens
    # not a sampling option but SGLang's top-level request field (`slime_core.routing_replay`): routing replay (R3)
    return_routed_experts: bool = False

    def to_json(self) -> dict[str, Any]:
        """The ``sampling_params`` object of a ``/generate`` body."""
        return {
            key: value for key, value in self.__dict__.items() if value is not None and key != "return_routed_experts"
        }

    def request_fields(self) -> dict[str, Any]:
        """The top-level ``/generate`` fields these options add beside ``sampling_params``."""
        return {"return_routed_experts": True} if self.return_routed_experts else {}


#: The ``custom_params`` key that asks an engine for each sampled token's nucleus (see the
#: module docstring); the name SGLang with slime's top-p patch reads.
TOP_P_REPLAY_PARAM = "return_top_p_token_ids"


def parallel_sample_seed(seed: int, index: int) -> int:
    """The seed of copy ``index`` of a request for ``n`` samples (``sampling_params.n``) that
    gives ``sampling_seed=seed``: copy 0 draws with ``seed`` itself, the others with seeds
    derived from it. An engine that honours seeds per copy (the CPU engine does) draws copy i
    exactly as a request for one sample with this seed, so a group sent as one request and the
    same samples sent one by one get the same tokens."""
    return (seed + index * 0x9E3779B1) & 0x7FFFFFFF


@dataclass
class GenerateResult:
    """One finished (or aborted) generation."""

    output_ids: list[int]  # (completion_tokens,) sampled token ids
    text: str  # decoded output (stop string excluded)
    finish_reason: str  # "stop", "length" or "abort"
    log_probs: list[float] = field(default_factory=list)  # (completion_tokens,) with return_logprob
    weight_version: str | None = None  # weights that finished the request
    prompt_tokens: int = 0
    top_p_token_ids: list[int] | None = None  # every output token's nucleus, concatenated (top-p replay)
    top_p_token_offsets: list[int] | None = None  # (completion_tokens + 1,) token t's: ids[offsets[t]:offsets[t + 1]]
    # ((prompt_tokens + completion_tokens - 1) × num_layers × top_k,) every fed token's routed experts,
    # asked for by ``return_routed_experts`` (routing replay, `slime_core.routing_replay`)
    routed_experts: list[int] | None = None


def parse_generate(body: dict[str, Any]) -> GenerateResult:
    """A ``/generate`` answer (SGLang's JSON: ``output_ids``, ``text``, ``meta_info`` with
    ``finish_reason``, ``output_token_logprobs``, ``weight_version``, for top-p replay
    ``top_p_token_ids`` / ``top_p_token_offsets``, for routing replay ``routed_experts``) as a
    `GenerateResult`."""
    meta = body.get("meta_info", {})
    finish = meta.get("finish_reason") or {}
    log_probs = [float(entry[0]) for entry in meta.get("output_token_logprobs") or []]
    return GenerateResult(
        output_ids=list(body.get("output_ids", [])),
        text=body.get("text", ""),
        finish_reason=finish.get("type", "stop") if isinstance(finish, dict) else str(finish),
        log_probs=log_probs,
        weight_version=None if meta.get("weight_version") is None else str(meta["weight_version"]),
        prompt_tokens=int(meta.get("prompt_tokens", 0)),
        top_p_token_ids=decode_int32s(meta.get("top_p_token_ids")),
        top_p_token_offsets=decode_int32s(meta.get("top_p_token_offsets")),
        routed_experts=decode_int32s(meta.get("routed_experts")),
    )


def encode_int32s(values: list[int]) -> str:
    """``values`` as base64 of int32 in the machine's byte order (little-endian wherever SGLang
    runs), the way SGLang sends top-p replay data."""
    return base64.b64encode(array("i", values).tobytes()).decode("ascii")


def decode_int32s(value: str | list[int] | None) -> list[int] | None:
    """Inverse of `encode_int32s`; a JSON list of ints (or None) passes through."""
    if value is None or isinstance(value, list):
        return value
    packed = array("i")
    packed.frombytes(base64.b64decode(value))
    return packed.tolist()


def append_result(sample: Sample, result: GenerateResult, text: str | None = None) -> None:
    """Add an engine's output to ``sample`` as trainable model tokens and set its status
    (``stop`` → completed, ``length`` → truncated, ``abort`` → aborted).

    ``text`` replaces the engine's text in the response (which leaves a matched stop string out).
    """
    finish_status = {"stop": SampleStatus.COMPLETED, "length": SampleStatus.TRUNCATED, "abort": SampleStatus.ABORTED}
    version = None if result.weight_version is None else version_number(result.weight_version)
    if result.output_ids:
        sample.append_response(
            result.output_ids,
            log_probs=result.log_probs,
            text=result.text if text is None else text,
            weight_version=version,
            top_p_token_ids=result.top_p_token_ids,
            top_p_token_offsets=result.top_p_token_offsets,
        )
    if result.routed_experts is not None:  # the request's tokens were the sample's: a row for each but the last
        sample.rollout_routed_experts = routing_rows(result.routed_experts, len(sample.tokens) - 1, sample.describe())
    sample.status = finish_status[result.finish_reason]


def version_number(weight_version: str) -> int:
    """The trainer's update count behind an engine's weight version: slime pushes weights
    as "1", "2", ...; "default" is SGLang's name for the weights the server started with (0)."""
    if weight_version == "default":
        return 0
    if not weight_version.isdigit():
        raise ValueError(f"engine weight version {weight_version!r} is not one slime pushed (a number, or 'default')")
    return int(weight_version)


class RolloutEngine(Protocol):
    """An engine, or a router in front of several, as rollout and generate functions use it:
    generation only. The control calls the loop makes (pause, abort, weight updates, ...) go
    to the engines themselves through `slime_core.rollout_backend.Engines`."""

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        return_logprob: bool = True,
        rid: str | None = None,
        image_data: list[str] | None = None,
        video_data: list[list[str]] | None = None,
    ) -> GenerateResult:
        """Sample a continuation of ``input_ids``; raise `EngineUnavailable` when the engine
        failed (not the request), `EngineError` when it refused the request. ``image_data``: the
        images (PNG data URLs, SGLang's field) whose tokens ``input_ids`` holds; ``video_data``:
        its videos, each a list of frames (PNG data URLs; SGLang's field, in the CPU engine's
        format); the rollout passes each only for a prompt with such inputs."""

    async def generate_parallel(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        n: int,
        return_logprob: bool = True,
        image_data: list[str] | None = None,
        video_data: list[list[str]] | None = None,
    ) -> list[GenerateResult]:
        """``n`` continuations of ``input_ids`` in one request (SGLang's parallel sampling,
        ``sampling_params.n``): the prompt travels and is prefilled once; copy i is seeded with
        ``parallel_sample_seed(sampling.sampling_seed, i)`` where the engine honours seeds.
        ``image_data``, ``video_data``: as for `generate`."""

    async def close(self) -> None:
        """Release connections (called on the event loop that used the client)."""
