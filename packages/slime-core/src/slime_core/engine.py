"""The rollout-engine contract: what the loop and the rollout function ask of an engine.

An engine turns token ids into sampled token ids with their log-probs. Every engine slime
drives (a real SGLang server, the sglang-router in front of several, the CPU engine) speaks
SGLang's native HTTP API, so one client (``slime_sglang.client.EngineClient``) implements
this protocol for all of them; the protocol is what a plugin's own engine client must offer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


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

    def to_json(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if value is not None}


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


class RolloutEngine(Protocol):
    """An engine (or a router in front of several), as the rollout side uses it."""

    async def generate(
        self, input_ids: list[int], sampling: SamplingParams, return_logprob: bool = True, rid: str | None = None
    ) -> GenerateResult:
        """Sample a continuation of ``input_ids``."""

    async def generate_parallel(
        self, input_ids: list[int], sampling: SamplingParams, n: int, return_logprob: bool = True
    ) -> list[GenerateResult]:
        """``n`` continuations of ``input_ids`` in one request (SGLang's parallel sampling,
        ``sampling_params.n``): the prompt travels and is prefilled once; copy i is seeded with
        ``parallel_sample_seed(sampling.sampling_seed, i)`` where the engine honours seeds."""

    async def abort(self, rid: str | None = None) -> None:
        """Abort request ``rid``, or every request when None; they return what they have."""

    async def pause_generation(self) -> None:
        """Stop decoding (running requests wait) until `continue_generation`."""

    async def continue_generation(self) -> None:
        """Resume decoding after `pause_generation`."""

    async def flush_cache(self) -> None:
        """Drop cached prefixes (after a weight update)."""

    async def update_weights_from_tensor(self, bucket, weight_version: str) -> None:
        """Load one bucket: ``(hf_name, tensor)`` pairs or a ``slime_core.weight_bucket.WeightBucket``."""

    async def update_weights_from_disk(self, model_path: str, weight_version: str) -> None:
        """Load the weights of a Hugging Face directory."""

    async def release_memory(self) -> None:
        """Free the engine's weights and cache memory (colocated mode, while training runs)."""

    async def resume_memory(self) -> None:
        """Take the memory back after `release_memory`."""

    async def health(self) -> bool:
        """Whether the engine answers."""

    async def weight_version(self) -> str:
        """The version of the weights the engine serves."""
