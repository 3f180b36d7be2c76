"""Ask a reward-model server for the reward, over HTTP.

POSTs ``{"response", "label", "metadata", "prompt"}`` as JSON to the server's URL. The
reward is the body's ``reward`` field, or the body itself when it is a bare number.

Connection errors, timeouts, 5xx answers and the two 4xx that mean "try again later"
(408 Request Timeout, 429 Too Many Requests) are retried with exponential backoff
(``backoff * 2**attempt`` seconds); any other 4xx answer is not retried (the request itself
is wrong). After the last attempt the error names the URL and the last failure.
"""

from __future__ import annotations

import asyncio
import json
import math

import httpx

RETRIED_STATUSES = frozenset({408, 429})


class RemoteRewardError(RuntimeError):
    """The reward server could not be reached or gave an unusable answer."""


async def remote_score(
    url: str,
    payload: dict,
    *,
    timeout: float = 30.0,
    max_retries: int = 3,
    backoff: float = 0.5,
) -> float:
    """The reward the server at `url` returns for `payload` (1 + `max_retries` attempts at most)."""
    body = await post_with_retries(url, payload, timeout=timeout, max_retries=max_retries, backoff=backoff)
    return reward_from_body(body, url)


async def post_with_retries(url: str, payload: dict, *, timeout: float, max_retries: int, backoff: float):
    """The decoded JSON body of a successful POST (see the module docstring for retries)."""
    content = json.dumps(payload, default=str)
    headers = {"content-type": "application/json"}
    last_failure = "no attempt made"
    async with httpx.AsyncClient(timeout=timeout) as client:
        for attempt in range(max_retries + 1):
            if attempt:
                await asyncio.sleep(backoff * 2 ** (attempt - 1))
            try:
                response = await client.post(url, content=content, headers=headers)
            except httpx.TransportError as error:  # connect/read errors and timeouts
                last_failure = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
                continue
            if response.status_code >= 500 or response.status_code in RETRIED_STATUSES:
                last_failure = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            return _decode(response, url)
    raise RemoteRewardError(
        f"reward server {url} failed after {max_retries + 1} attempts (last: {last_failure}); "
        "check that it is running and reachable, or raise --rm-request-timeout / --rm-max-retries"
    )


def reward_from_body(body, url: str) -> float:
    """The number in ``body["reward"]``, or `body` itself if it is a number."""
    value = body.get("reward") if isinstance(body, dict) else body
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RemoteRewardError(
            f"reward server {url} answered {json.dumps(body)[:200]}; expected a number or "
            'a JSON object with a numeric "reward" field'
        )
    return float(value)


def _decode(response: httpx.Response, url: str):
    if response.status_code >= 400:
        raise RemoteRewardError(
            f"reward server {url} rejected the request with HTTP {response.status_code}: "
            f"{response.text[:200]}; check the payload format the server expects"
        )
    try:
        return response.json()
    except ValueError as error:
        raise RemoteRewardError(f"reward server {url} answered with non-JSON: {response.text[:200]!r}") from error
