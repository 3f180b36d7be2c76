"""The innermost handler: forwards a request to sglang-router and returns its answer.

A request that names a session (``X-Session-Id``) but no routing key gets the session as
sglang-router's routing key, so every request of a session reaches the same engine. With an
API key (a run across nodes, whose front let in only requests that carry it) every request
goes on with it, the middlewares' own requests included; otherwise with the caller's header.
"""

from __future__ import annotations

import asyncio

import aiohttp

from slime_router.handlers import ROUTING_KEY_HEADER, SESSION_HEADER, Request, Response, error_response

#: Headers that belong to one connection, not to the message (RFC 9110 7.6.1).
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
)
#: Not forwarded either: aiohttp sets them for the message it sends (and decompresses answers).
REQUEST_SKIPPED = HOP_BY_HOP | {"host", "content-length"}
RESPONSE_SKIPPED = HOP_BY_HOP | {"content-length", "content-encoding"}


class Proxy:
    """Forwards to the sglang-router at ``upstream`` over one pooled HTTP client."""

    def __init__(self, upstream: str, api_key: str | None = None):
        self.upstream = upstream.rstrip("/")
        self._key = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._client: aiohttp.ClientSession | None = None

    async def __call__(self, request: Request) -> Response:
        url = f"{self.upstream}{request.path}" + (f"?{request.query}" if request.query else "")
        try:
            async with self._session().request(
                request.method, url, data=request.body, headers={**_forwarded(request.headers), **self._key}
            ) as answer:
                body = await answer.read()
                return Response(answer.status, body, _returned(answer.headers))
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            return error_response(
                502,
                f"sglang-router at {self.upstream} did not answer {request.method} {request.path} "
                f"({type(exc).__name__}: {exc}); is it running?",
            )

    def _session(self) -> aiohttp.ClientSession:
        if self._client is None:  # created in the serving event loop, on first use
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)  # no cap: the router queues
            self._client = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


def _returned(headers) -> dict[str, str]:
    """The answer's headers to pass back (lower-case names), without the connection's own."""
    return {name.lower(): value for name, value in headers.items() if name.lower() not in RESPONSE_SKIPPED}


def _forwarded(headers: dict[str, str]) -> dict[str, str]:
    """The headers to send upstream: no hop-by-hop ones, and the session as the routing key."""
    forwarded = {name: value for name, value in headers.items() if name not in REQUEST_SKIPPED}
    if SESSION_HEADER in forwarded and ROUTING_KEY_HEADER not in forwarded:
        forwarded[ROUTING_KEY_HEADER] = forwarded[SESSION_HEADER]
    return forwarded
