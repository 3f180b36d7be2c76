"""`EngineClient`: SGLang's native HTTP API, for a real SGLang server, the sglang-router in
front of several, or the CPU engine (``slime_core.engine.RolloutEngine``).

A failed control call (abort, pause, update, ...) raises `EngineError` naming the engine,
the endpoint and the answer; a ``/generate`` that the server refuses (4xx) raises too, with
the server's message, because it means the request itself is wrong. When the engine is not
there to answer (no connection, or a 5xx from it or from the router in front of it) the error
is the subclass `EngineUnavailable`: with ``--use-fault-tolerance`` the rollout generates
such a sample again once the engines are back (``slime_sglang.generate.generate_resilient``).
"""

from __future__ import annotations

from typing import Any

import httpx

from slime_core.engine import GenerateResult, SamplingParams


class EngineError(RuntimeError):
    """An engine refused or failed a call."""


class EngineUnavailable(EngineError):
    """The engine did not answer, or answered 5xx: it (or the router's route to it) failed,
    not the request."""


class EngineClient:
    """One HTTP client for one base URL (an engine or a router)."""

    def __init__(self, url: str, timeout: float | None = None):
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.url, timeout=timeout, trust_env=False)

    async def close(self) -> None:
        await self._http.aclose()

    async def generate(
        self, input_ids: list[int], sampling: SamplingParams, return_logprob: bool = True, rid: str | None = None
    ) -> GenerateResult:
        body: dict[str, Any] = {"input_ids": input_ids, "sampling_params": sampling.to_json(), "return_logprob": return_logprob}
        if rid is not None:
            body["rid"] = rid
        return parse_generate(await self._post("/generate", body))

    async def abort(self, rid: str | None = None) -> None:
        await self._post("/abort_request", {"rid": rid} if rid is not None else {"abort_all": True})

    async def pause_generation(self) -> None:
        await self._post("/pause_generation", {})

    async def continue_generation(self) -> None:
        await self._post("/continue_generation", {})

    async def flush_cache(self) -> None:
        await self._post("/flush_cache", {})

    async def update_weights_from_tensor(self, named_tensors: list[tuple[str, Any]], weight_version: str) -> None:
        from slime_sglang.tensor_payload import encode_bucket

        body = {"serialized_named_tensors": [encode_bucket(named_tensors)], "weight_version": weight_version, "flush_cache": True}
        _check_success(await self._post("/update_weights_from_tensor", body), self.url, "/update_weights_from_tensor")

    async def update_weights_from_disk(self, model_path: str, weight_version: str) -> None:
        body = {"model_path": model_path, "weight_version": weight_version}
        _check_success(await self._post("/update_weights_from_disk", body), self.url, "/update_weights_from_disk")

    async def init_weights_update_group(self, master_address: str, master_port: int, rank_offset: int, world_size: int,
                                        group_name: str, backend: str) -> None:
        """Join the sender's weight-update group (see `slime_sglang.weight_broadcast`) at ranks
        ``rank_offset``...; answers once the whole group has formed."""
        body = {"master_address": master_address, "master_port": master_port, "rank_offset": rank_offset,
                "world_size": world_size, "group_name": group_name, "backend": backend}
        _check_success(await self._post("/init_weights_update_group", body), self.url, "/init_weights_update_group")

    async def update_weights_from_distributed(self, names: list[str], dtypes: list[str], shapes: list[list[int]],
                                              group_name: str, weight_version: str) -> None:
        """Receive the announced tensors by broadcast on ``group_name`` and load them; answers
        once they are loaded (the sender broadcasts meanwhile)."""
        body = {"names": names, "dtypes": dtypes, "shapes": shapes, "group_name": group_name,
                "weight_version": weight_version, "flush_cache": True}
        _check_success(await self._post("/update_weights_from_distributed", body), self.url, "/update_weights_from_distributed")

    async def destroy_weights_update_group(self, group_name: str) -> None:
        body = {"group_name": group_name}
        _check_success(await self._post("/destroy_weights_update_group", body), self.url, "/destroy_weights_update_group")

    async def release_memory(self) -> None:
        await self._post("/release_memory_occupation", {})

    async def resume_memory(self) -> None:
        await self._post("/resume_memory_occupation", {})

    async def health(self) -> bool:
        try:
            return (await self._http.get("/health", timeout=5.0)).status_code == 200
        except httpx.HTTPError:
            return False

    async def server_info(self) -> dict[str, Any]:
        response = await self._http.get("/server_info")
        _raise_for_status(response, self.url, "/server_info")
        return response.json()

    async def weight_version(self) -> str:
        return str((await self.server_info())["weight_version"])

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self._http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise EngineUnavailable(f"engine {self.url}{path} did not answer ({type(exc).__name__}: {exc}); is it running?") from exc
        _raise_for_status(response, self.url, path)
        return response.json() if response.content else {}


def parse_generate(body: dict[str, Any]) -> GenerateResult:
    """A ``/generate`` answer as a `GenerateResult`."""
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
    )


def _raise_for_status(response: httpx.Response, url: str, path: str) -> None:
    if response.status_code < 400:
        return
    error = EngineUnavailable if response.status_code >= 500 else EngineError
    raise error(f"engine {url}{path} answered {response.status_code}: {response.text[:500]}")


def _check_success(body: dict[str, Any], url: str, path: str) -> None:
    if not body.get("success", False):
        raise EngineError(f"engine {url}{path} refused: {body.get('message', body)}")
