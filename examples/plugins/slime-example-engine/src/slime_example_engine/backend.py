"""A rollout backend whose engine is a transformers model sampling in the driver process.

It implements slime-core's two rollout protocols and nothing else, which is all a rollout
engine plugin needs (``slime_core.rollout_backend``):

- `InProcessBackend` (``RolloutBackend``): it reserves no bundle (the engine lives in the
  driver), starts one `Engine`, and hands out the engine itself as the generation client;
- `Engine` (``Engines`` and ``RolloutEngine`` at once): it samples token by token with a KV
  cache, one request at a time in a worker thread, returning the log-probs of what it drew
  at the request's temperature, each copy of a request for n samples with its own seed
  (``per_copy_seeds``); it takes new weights by the ``tensor`` transport.

Run with ``--rollout-backend hf-inprocess --router none`` (no router: one engine).
"""

from __future__ import annotations

import asyncio

import torch
from transformers import AutoModelForCausalLM

from slime_core.engine import EngineError, GenerateResult, SamplingParams, parallel_sample_seed

ADDRESS = "inprocess://engine-0"


class Engine:
    """One model in this process: generation (``RolloutEngine``) and control (``Engines``)."""

    transports = ("tensor",)
    restartable = False
    per_copy_seeds = True  # copy i of a parallel request draws with parallel_sample_seed(seed, i)

    def __init__(self, model_path: str, tokenizer):
        self.model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32).eval()
        self.tokenizer, self.eos_token_id, self.version = tokenizer, tokenizer.eos_token_id, "default"
        self.urls = [ADDRESS]
        self._running = asyncio.Event()
        self._running.set()  # cleared while paused for a weight update
        self._aborted = 0  # bumped by `abort`: requests that started before it stop
        self._one_at_a_time = asyncio.Lock()

    # ---- generation (RolloutEngine) ---------------------------------------------------
    async def generate(self, input_ids, sampling: SamplingParams, return_logprob=True, rid=None) -> GenerateResult:
        await self._running.wait()
        async with self._one_at_a_time:
            return await asyncio.to_thread(self._sample, list(input_ids), sampling, self._aborted)

    async def generate_parallel(self, input_ids, sampling: SamplingParams, n: int, return_logprob=True):
        seed = sampling.sampling_seed
        seeds = [None if seed is None else parallel_sample_seed(seed, i) for i in range(n)]
        copies = [SamplingParams(**{**sampling.__dict__, "sampling_seed": one}) for one in seeds]
        return [await self.generate(input_ids, copy) for copy in copies]

    async def close(self) -> None:
        """Nothing to release: no connection."""

    @torch.no_grad()
    def _sample(self, input_ids: list[int], sampling: SamplingParams, aborted_at_start: int) -> GenerateResult:
        generator = torch.Generator()
        if sampling.sampling_seed is None:
            generator.seed()  # each request draws anew, so the samples of a group differ
        else:
            generator.manual_seed(sampling.sampling_seed)
        logits, cache = self._forward(torch.tensor([input_ids]), None)
        ids, log_probs, finish = [], [], "length"
        for _ in range(sampling.max_new_tokens):
            if self._aborted != aborted_at_start:
                finish = "abort"
                break
            scaled = torch.log_softmax(logits / max(sampling.temperature, 1e-6), dim=-1)
            token = (
                int(torch.multinomial(scaled.exp(), 1, generator=generator))
                if sampling.temperature > 0
                else int(scaled.argmax())
            )
            ids.append(token)
            log_probs.append(float(scaled[token]))
            if token == self.eos_token_id or token in (sampling.stop_token_ids or []):
                finish = "stop"
                break
            logits, cache = self._forward(torch.tensor([[token]]), cache)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return GenerateResult(ids, text, finish, log_probs, self.version, len(input_ids))

    def _forward(self, ids: torch.Tensor, cache):
        out = self.model(input_ids=ids, past_key_values=cache, use_cache=True)
        return out.logits[0, -1].float(), out.past_key_values

    # ---- control (Engines) ------------------------------------------------------------
    async def pause(self) -> None:
        self._running.clear()

    async def resume_generation(self) -> None:
        self._running.set()

    async def abort(self) -> None:
        self._aborted += 1

    async def flush_cache(self) -> None:
        """No cache outlives a request."""

    async def release_memory(self) -> None:
        """Kept: on a CPU there is nothing to hand to the trainer."""

    async def resume_memory(self) -> None:
        """Nothing was released."""

    async def update_weights_from_tensor(self, bucket, version: str) -> None:
        named = dict(bucket)
        unknown = sorted(set(named) - set(self.model.state_dict()))
        if unknown:
            raise EngineError(f"{ADDRESS}: unknown parameter name(s) {unknown[:3]}")
        self.model.load_state_dict(named, strict=False)
        self.version = version

    async def update_weights_by_broadcast(self, bucket, version: str) -> None:
        raise EngineError(f"{ADDRESS} takes the tensor transport only")

    async def update_weights_from_disk(self, path: str, version: str) -> None:
        raise EngineError(f"{ADDRESS} takes the tensor transport only")

    async def close_weight_updates(self) -> None:
        """No group to leave."""

    def health_problem(self, index: int, timeout: float) -> str | None:
        return None  # it lives in this process: it is up while the run is

    def restart(self, index: int) -> str:
        raise EngineError(f"{ADDRESS} cannot be restarted: it is part of the driver")

    def only(self, index: int) -> Engine:
        return self

    def shutdown(self) -> None:
        self.model = None


class InProcessBackend:
    """``RolloutBackend``: one `Engine`, in the driver, on ``--hf-checkpoint``."""

    def engine_bundles(self, config, gpu: bool) -> list[dict[str, float]]:
        return []  # nothing to reserve: the engine is part of the driver

    def start(self, config, actor_options, plugins) -> Engine:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(config.hf_checkpoint, local_files_only=True)
        self.engine = Engine(config.hf_checkpoint, tokenizer)
        return self.engine

    def client(self, url: str, api_key: str | None = None) -> Engine:
        """The engine itself (``api_key``, the run's token, guards nothing here: no server)."""
        if url != ADDRESS:
            raise EngineError(f"hf-inprocess serves {ADDRESS}, not {url}; run it with --router none")
        return self.engine


backend = InProcessBackend()
