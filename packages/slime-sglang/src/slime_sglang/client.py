"""`EngineClient`: SGLang's native HTTP API, for a real SGLang server, the sglang-router in
front of several, or the CPU engine (``slime_core.engine.RolloutEngine``).

A failed control call (abort, pause, update, ...) raises `EngineError` naming the engine,
the endpoint and the answer; a ``/generate`` that the server refuses (4xx) raises too, with
the server's message, because it means the request itself is wrong. When the engine is not
there to answer (no connection, or a 5xx from it or from the router in front of it) the error
is the subclass `EngineUnavailable`: with ``--use-fault-tolerance`` the rollout generates
such a sample again once the engines are back (``slime_core.rollout.generate.generate_resilient``).
Both errors are slime-core's (``slime_core.engine``), shared by every rollout backend, and so is
the generation over SGLang's ``/generate`` (``slime_core.generate_wire``), which slime-vllm's
client speaks to a router in front of vLLM servers too.

The transport is an aiohttp session per event loop (``slime_core.rollout.http_session``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from slime_core.engine import EngineError, EngineUnavailable
from slime_core.generate_wire import SGLangGenerate
from slime_core.rank.weight_bucket import WeightBucket
from slime_core.rollout.http_session import HttpClient

JSON_CONTENT = {"Content-Type": "application/json"}
OCTET_STREAM = {"Content-Type": "application/octet-stream"}


class EngineClient(SGLangGenerate, HttpClient):
    """One HTTP client for one base URL (an engine or a router); ``timeout``: seconds a call
    may take (None: no limit, as a long generation needs); ``api_key``: sent as
    ``Authorization: Bearer`` with every call (the run's token, ``slime_core.cluster.network``)."""

    async def abort(self, rid: str | None = None) -> None:
        await self._post("/abort_request", {"rid": rid} if rid is not None else {"abort_all": True})

    async def pause_generation(self) -> None:
        """Running requests wait (SGLang's ``retract`` mode: back to the queue, recomputed on
        resume, so the cache may be flushed meanwhile); SGLang's default mode aborts them."""
        await self._post("/pause_generation", {"mode": "retract"})

    async def continue_generation(self) -> None:
        await self._post("/continue_generation", {})

    async def flush_cache(self) -> None:
        await self._post("/flush_cache", {})

    async def update_weights_from_tensor(
        self, bucket: WeightBucket | list[tuple[str, Any]], weight_version: str
    ) -> None:
        """Load one bucket; its safetensors bytes are the body (see `slime_sglang.tensor_payload`)."""
        query = {"weight_version": weight_version, "flush_cache": "true"}
        data = WeightBucket.of(bucket).data
        _check_success(
            await self._call("POST", "/update_weights_from_tensor", data, OCTET_STREAM, query),
            self.url,
            "/update_weights_from_tensor",
        )

    async def update_weights_from_disk(self, model_path: str, weight_version: str) -> None:
        body = {"model_path": model_path, "weight_version": weight_version}
        _check_success(await self._post("/update_weights_from_disk", body), self.url, "/update_weights_from_disk")

    async def pull_weights(self, source_dir: str, local_dir: str, version: int) -> None:
        """Bring this engine host's local checkpoint to published ``version`` (delta weight sync)."""
        body = {"source_dir": source_dir, "local_checkpoint_dir": local_dir, "target_version": version}
        _check_success(await self._post("/pull_weights", body), self.url, "/pull_weights")

    async def init_weights_update_group(
        self, master_address: str, master_port: int, rank_offset: int, world_size: int, group_name: str, backend: str
    ) -> None:
        """Join the sender's weight-update group (see `slime_sglang.weight_broadcast`) at ranks
        ``rank_offset``...; answers once the whole group has formed."""
        body = {
            "master_address": master_address,
            "master_port": master_port,
            "rank_offset": rank_offset,
            "world_size": world_size,
            "group_name": group_name,
            "backend": backend,
        }
        _check_success(await self._post("/init_weights_update_group", body), self.url, "/init_weights_update_group")

    async def update_weights_from_distributed(
        self, names: list[str], dtypes: list[str], shapes: list[list[int]], group_name: str, weight_version: str
    ) -> None:
        """Receive the announced tensors by broadcast on ``group_name`` and load them; answers
        once they are loaded (the sender broadcasts meanwhile)."""
        body = {
            "names": names,
            "dtypes": dtypes,
            "shapes": shapes,
            "group_name": group_name,
            "weight_version": weight_version,
            "flush_cache": True,
        }
        _check_success(
            await self._post("/update_weights_from_distributed", body), self.url, "/update_weights_from_distributed"
        )

    async def destroy_weights_update_group(self, group_name: str) -> None:
        body = {"group_name": group_name}
        _check_success(
            await self._post("/destroy_weights_update_group", body), self.url, "/destroy_weights_update_group"
        )

    async def release_memory(self) -> None:
        await self._post("/release_memory_occupation", {})

    async def resume_memory(self) -> None:
        await self._post("/resume_memory_occupation", {})

    async def health(self) -> bool:
        try:
            async with self._http().get(self.url + "/health", timeout=aiohttp.ClientTimeout(total=5.0)) as response:
                return response.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False

    async def server_info(self) -> dict[str, Any]:
        return await self._call("GET", "/server_info")

    async def weight_version(self) -> str:
        return str((await self.server_info())["weight_version"])

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call("POST", path, body)

    async def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | bytes | None = None,
        content_type: dict[str, str] = JSON_CONTENT,
        query: dict[str, str] | None = None,
    ) -> Any:
        """The JSON answer of ``method path`` (``{}`` when empty); errors as the module says.
        ``body``: a JSON object, or bytes of ``content_type``."""
        send = {"data": body, "headers": content_type} if isinstance(body, bytes) else {"json": body}
        try:
            async with self._http().request(method, self.url + path, params=query, **send) as response:
                status, content = response.status, await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            reason = str(exc) or "no answer in time"
            raise EngineUnavailable(
                f"engine {self.url}{path} did not answer ({type(exc).__name__}: {reason}); is it running?"
            ) from exc
        if status >= 400:
            error = EngineUnavailable if status >= 500 else EngineError
            raise error(f"engine {self.url}{path} answered {status}: {content[:500].decode(errors='replace')}")
        return json.loads(content) if content else {}


def _check_success(body: dict[str, Any], url: str, path: str) -> None:
    if not body.get("success", False):
        raise EngineError(f"engine {url}{path} refused: {body.get('message', body)}")
