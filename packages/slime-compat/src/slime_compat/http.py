"""Async JSON over HTTP (``slime.utils.http_utils``): ``await post(url, payload)`` and
``await get(url)`` as slime's generate functions and tools call them, retried on connection
errors and 5xx answers.

A request to one of the run's servers (the router or engine that `SlimeArgs.set_router`
named, `send_token_to`) carries the run's token, which those servers want (on every route when
the run spans nodes, ``slime_core.cluster.network``); a request elsewhere (a user's reward server)
carries no token of ours. A caller's own ``Authorization`` header wins.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import httpx

_CLIENTS: dict[int, httpx.AsyncClient] = {}
_TOKENS: dict[tuple[str, str | None, int | None], str] = {}  # (scheme, host, port) of a run's server -> its token


def send_token_to(url: str, token: str) -> None:
    """Send ``token`` with every request to the server at ``url`` (its scheme, host and port)."""
    _TOKENS[_origin(url)] = token


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    return parts.scheme, parts.hostname, parts.port


def _with_token(url: str, headers: dict | None) -> dict | None:
    """``headers`` with the run's token for ``url``'s server, if it is one of the run's."""
    token = _TOKENS.get(_origin(url))
    if token is None or any(name.lower() == "authorization" for name in headers or {}):
        return headers
    return {**(headers or {}), "Authorization": f"Bearer {token}"}


def _client() -> httpx.AsyncClient:
    """One client per event loop (a client cannot be shared across loops)."""
    loop = asyncio.get_running_loop()
    if id(loop) not in _CLIENTS:
        _CLIENTS[id(loop)] = httpx.AsyncClient(timeout=None)
    return _CLIENTS[id(loop)]


async def _request(method: str, url: str, max_retries: int, **kwargs):
    for attempt in range(max_retries):
        try:
            response = await _client().request(method, url, **kwargs)
            if response.status_code < 500 or attempt + 1 == max_retries:
                response.raise_for_status()
                return response.json()
        except httpx.TransportError:
            if attempt + 1 == max_retries:
                raise
        await asyncio.sleep(min(2**attempt * 0.1, 5.0))


async def post(url: str, payload: dict, max_retries: int = 60, headers: dict | None = None):
    """POST ``payload`` as JSON and return the JSON answer."""
    return await _request("POST", url, max_retries, json=payload, headers=_with_token(url, headers))


async def get(url: str):
    """GET ``url`` and return the JSON answer."""
    return await _request("GET", url, 1, headers=_with_token(url, None))
