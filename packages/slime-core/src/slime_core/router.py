"""The router contract, and ``--router none``: engines used in turn without a router.

A router is registered by name (``slime_register_routers``; slime-router registers
``sglang``, the core registers ``none``) as a start function ``start(config, worker_urls,
plugins) -> Router``, selected with ``--router``. The loop starts it while the engines start,
with no engine (``worker_urls`` empty), adds each engine once it answers, sends generation
to ``router.url`` (through the rollout backend's client), tells it when fault tolerance
replaces an engine, and logs its metrics with every rollout.

``--router none`` starts nothing: `DirectRouter` keeps the engines' addresses, and generation
goes to them in turn (`EnginesInTurn`), one request (or one group) to the next engine.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from slime_core.engine import GenerateResult, RolloutEngine, SamplingParams

if TYPE_CHECKING:
    from slime_core.config import Config
    from slime_core.plugins import Plugins


class Router(Protocol):
    """A running router in front of a run's engines."""

    @property
    def url(self) -> str | None:
        """Where generation goes; None: no router process, the engines are used in turn."""

    def add_worker(self, url: str) -> None:
        """Route to the engine at ``url`` too (returns once it is routed to)."""

    def remove_worker(self, url: str) -> None:
        """Stop routing to the engine at ``url`` (no-op if it is not routed to)."""

    def workers(self) -> list[str]:
        """The engines routed to."""

    def metrics(self) -> dict[str, float]:
        """Metrics since the last call, logged with each rollout (``{}`` if none)."""

    def stop(self) -> None:
        """Stop what the router started (idempotent)."""


#: A registered router: ``start(config, worker_urls, plugins) -> Router`` (see the module docstring).
RouterStart = Callable[["Config", list[str], "Plugins"], Router]


class DirectRouter:
    """``--router none``: no process; the addresses of the engines, used in turn."""

    url: str | None = None

    def __init__(self, worker_urls: list[str]):
        self._workers = list(worker_urls)

    @classmethod
    def start(cls, config: Config, worker_urls: list[str], plugins: Plugins | None = None) -> DirectRouter:
        return cls(worker_urls)

    def add_worker(self, url: str) -> None:
        if url not in self._workers:
            self._workers.append(url)

    def remove_worker(self, url: str) -> None:
        if url in self._workers:
            self._workers.remove(url)

    def workers(self) -> list[str]:
        return list(self._workers)

    def metrics(self) -> dict[str, float]:
        return {}

    def stop(self) -> None:
        """Nothing runs."""


class EnginesInTurn:
    """A `RolloutEngine` over a `DirectRouter`'s engines: each request goes to the next engine
    routed to (engines added or removed later included), through the backend's client for it."""

    def __init__(self, router: Router, client_for: Callable[[str], RolloutEngine]):
        self.router, self.client_for = router, client_for
        self._clients: dict[str, RolloutEngine] = {}
        self._turn = itertools.count()

    def _next(self) -> RolloutEngine:
        workers = self.router.workers()
        if not workers:
            from slime_core.engine import EngineUnavailable

            raise EngineUnavailable("--router none: no engine to send to (every engine was removed)")
        url = workers[next(self._turn) % len(workers)]
        if url not in self._clients:
            self._clients[url] = self.client_for(url)
        return self._clients[url]

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        return_logprob: bool = True,
        rid: str | None = None,
        image_data: list[str] | None = None,
        video_data: list[list[str]] | None = None,
    ) -> GenerateResult:
        media = _media(image_data, video_data)
        return await self._next().generate(input_ids, sampling, return_logprob=return_logprob, rid=rid, **media)

    async def generate_parallel(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        n: int,
        return_logprob: bool = True,
        image_data: list[str] | None = None,
        video_data: list[list[str]] | None = None,
    ) -> list[GenerateResult]:
        media = _media(image_data, video_data)
        return await self._next().generate_parallel(input_ids, sampling, n, return_logprob=return_logprob, **media)

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()


def generation_client(router: Router, client_for: Callable[[str], RolloutEngine]) -> RolloutEngine:
    """Where a rollout sends generation: the router's address, or the engines in turn."""
    if router.url is None:
        return EnginesInTurn(router, client_for)
    return client_for(router.url)


def _media(image_data: list[str] | None, video_data: list[list[str]] | None) -> dict:
    """The media keyword arguments that were given: clients without vision take none."""
    return {key: value for key, value in (("image_data", image_data), ("video_data", video_data)) if value}
