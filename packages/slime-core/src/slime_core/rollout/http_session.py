"""`LoopSession`: the aiohttp session of the running event loop, for the rollout engines' HTTP clients.

A rollout sends one request per sample, and httpx's client spent about 3 ms of CPU on each
(0.8 s per 256-sample rollout on 2 cores, more than the CPU engine's forwards); aiohttp spends
a tenth of that. An aiohttp session belongs to the event loop that made it, so the session is
made on first use, and again when it is used from another loop (a later ``asyncio.run``).
Shared by every rollout backend's client (slime-sglang's, slime-vllm's), which extend `HttpClient`.
"""

from __future__ import annotations

import asyncio

import aiohttp

#: Connections one client keeps open at most (one per request in flight); more requests wait
#: for a free one. Bounded so that a rollout of thousands of samples stays under the usual
#: limit of 1,024 open files per process.
MAX_CONNECTIONS = 512


class LoopSession:
    """``timeout``: seconds a call may take (None: no limit, as a long generation needs);
    ``api_key``: sent as ``Authorization: Bearer`` with every call (the run's token)."""

    def __init__(self, timeout: float | None = None, api_key: str | None = None):
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the session's

    def get(self) -> aiohttp.ClientSession:
        """The session of the running event loop."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS, limit_per_host=MAX_CONNECTIONS)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, headers=self._headers)
            self._loop = loop
        return self._session

    async def close(self) -> None:
        """Close the session if it belongs to the running loop (another loop's is forgotten)."""
        if self._session is not None and self._loop is asyncio.get_running_loop():
            await self._session.close()
        self._session = self._loop = None


class HttpClient:
    """The base of an engine's HTTP client: one base URL, and the session of the running loop."""

    def __init__(self, url: str, timeout: float | None = None, api_key: str | None = None):
        self.url = url.rstrip("/")
        self._sessions = LoopSession(timeout, api_key)

    def _http(self) -> aiohttp.ClientSession:
        return self._sessions.get()

    async def close(self) -> None:
        await self._sessions.close()
