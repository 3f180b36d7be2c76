"""`VLLMClient`: slime's vLLM servers over HTTP, generation (``slime_core.engine.RolloutEngine``) and control.

Generation is SGLang's ``POST /generate`` (``slime_core.generate_wire``), which slime's vLLM
servers translate to vLLM's token-in, token-out route (`slime_vllm.sglang_route`), so the same
client talks to one server or to a router (sglang-router, slime-router) in front of several.
The log-probs are training's (``log softmax(logits / temperature)``) because the server runs
with ``--logprobs-mode processed_logprobs``.

A request for n samples with a seed goes as n requests, copy i seeded with
``slime_core.engine.parallel_sample_seed(seed, i)`` (vLLM gives the copies of one request
seeds of its own), so a group sent at once and its samples sent one by one draw the same
tokens (through a router, spread over its engines); without a seed it is one request with
``n`` (the prompt is prefilled once).

Control calls are vLLM's RL routes: ``/pause?mode=keep`` (running requests wait in place;
``abort``, vLLM's default, would end them), ``/resume``, ``/abort_requests`` with no ids
(every request: vLLM renames a request ``generate-tokens-<id>``, so an abort by the
client's id would silently do nothing), ``/reset_prefix_cache``, ``/collective_rpc`` (the
worker methods of `slime_vllm.worker_extension`), ``/update_weight_version``,
``/weight_info``, ``/sleep`` and ``/wake_up``.

Errors are slime-core's: `EngineError` names the engine, the route and the answer;
`EngineUnavailable` (no answer, or a 5xx) marks an engine that failed rather than a request.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import aiohttp

from slime_core.engine import EngineError, EngineUnavailable, GenerateResult, SamplingParams, parallel_sample_seed
from slime_core.generate_wire import SGLangGenerate
from slime_core.rank.weight_bucket import WeightBucket
from slime_core.rollout.http_session import HttpClient


class VLLMClient(SGLangGenerate, HttpClient):
    """One HTTP client for one vLLM server; ``timeout``: seconds a call may take (None: no
    limit); ``api_key``: sent as ``Authorization: Bearer`` (the run's token)."""

    # ---- generation ---------------------------------------------------------------------
    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        return_logprob: bool = True,
        rid: str | None = None,
        image_data: list[str] | None = None,
        video_data: list[list[str]] | None = None,
    ) -> GenerateResult:
        _refuse_images(image_data, video_data)
        return await super().generate(input_ids, sampling, return_logprob, rid)

    async def generate_parallel(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        n: int,
        return_logprob: bool = True,
        image_data: list[str] | None = None,
        video_data: list[list[str]] | None = None,
    ) -> list[GenerateResult]:
        _refuse_images(image_data, video_data)
        if sampling.sampling_seed is None:
            return await super().generate_parallel(input_ids, sampling, n, return_logprob)
        copies = [
            SamplingParams(**{**sampling.__dict__, "sampling_seed": parallel_sample_seed(sampling.sampling_seed, i)})
            for i in range(n)
        ]
        return list(await asyncio.gather(*(self.generate(input_ids, copy, return_logprob) for copy in copies)))

    # ---- control ------------------------------------------------------------------------
    async def pause(self) -> None:
        await self._call("POST", "/pause", query={"mode": "keep"})

    async def resume(self) -> None:
        await self._call("POST", "/resume")

    async def abort_all(self) -> None:
        await self._call("POST", "/abort_requests", {})

    async def flush_cache(self) -> None:
        """Empty vLLM's prefix cache. vLLM answers whether it did: it refuses while requests hold cache
        blocks (none do after ``/pause``, which preempts the running ones), and a refusal is an error."""
        answer = await self._call("POST", "/reset_prefix_cache")
        if not answer.get("success"):
            raise EngineError(
                f"vLLM engine {self.url}/reset_prefix_cache did not empty its prefix cache ({answer}): requests "
                "still hold cache blocks; pause the engine first"
            )

    async def sleep(self) -> None:
        await self._call("POST", "/sleep", query={"level": "1", "mode": "keep"})

    async def wake_up(self) -> None:
        await self._call("POST", "/wake_up")

    async def collective_rpc(self, method: str, *args: str) -> Any:
        return await self._call("POST", "/collective_rpc", {"method": method, "args": list(args)})

    async def load_from_disk(self, path: str, version: str) -> None:
        await self.collective_rpc("slime_load_from_disk", path)
        await self.set_weight_version(version)

    async def load_bucket(self, bucket: WeightBucket, version: str) -> None:
        await self.collective_rpc("slime_load_bucket", base64.b64encode(bucket.data).decode("ascii"))
        await self.set_weight_version(version)

    async def set_weight_version(self, version: str) -> None:
        await self._call("POST", "/update_weight_version", {"new_version": version})

    async def weight_version(self) -> str:
        return str((await self._call("GET", "/weight_info"))["weight_version"])

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, query: dict[str, str] | None = None
    ) -> Any:
        """The JSON answer of ``method path`` (``{}`` when empty); errors as the module says."""
        try:
            async with self._http().request(method, self.url + path, json=body, params=query) as response:
                status, content = response.status, await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            reason = str(exc) or "no answer in time"
            raise EngineUnavailable(
                f"vLLM engine {self.url}{path} did not answer ({type(exc).__name__}: {reason}); is it running?"
            ) from exc
        if status >= 400:
            error = EngineUnavailable if status >= 500 else EngineError
            raise error(f"vLLM engine {self.url}{path} answered {status}: {content[:500].decode(errors='replace')}")
        return json.loads(content) if content else {}


def _refuse_images(image_data: list[str] | None, video_data: list[list[str]] | None = None) -> None:
    """`EngineError` for a prompt with images or videos: this client sends token ids only."""
    if image_data or video_data:
        raise EngineError(
            "the vllm rollout backend sends token ids only, not a prompt's images or videos (--multimodal-keys); "
            "use --rollout-engine sglang or cpu for vision-language models"
        )
