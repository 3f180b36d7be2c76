"""Async JSON over HTTP (``slime.utils.http_utils``): ``await post(url, payload)`` and
``await get(url)`` as slime's generate functions and tools call them, retried on connection
errors and 5xx answers."""

from __future__ import annotations

import asyncio

import httpx

_CLIENTS: dict[int, httpx.AsyncClient] = {}


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
        await asyncio.sleep(min(2 ** attempt * 0.1, 5.0))


async def post(url: str, payload: dict, max_retries: int = 60, headers: dict | None = None):
    """POST ``payload`` as JSON and return the JSON answer."""
    return await _request("POST", url, max_retries, json=payload, headers=headers)


async def get(url: str):
    """GET ``url`` and return the JSON answer."""
    return await _request("GET", url, 1)
