"""The ``retry`` middleware: a generation request that fails because an engine died, failed
or timed out is sent again, at most ``--router-middleware-retries`` more times.

A failure is a 500/502/503/504 answer, or no answer within ``--router-middleware-timeout``
seconds. After each one the middleware asks every engine sglang-router lists for
``GET /health`` and removes those that do not answer from the router, so the next attempt
(and every later request) goes to a live engine. When every engine answers (a stuck or
failing engine), the next attempt gets a fresh routing key, so that a sticky policy may
choose another engine. Each failure and each removal is logged; an answer that needed
retries carries ``X-Slime-Retries: N``.

Only generation routes are retried (``/generate``, ``/v1/chat/completions``,
``/v1/completions``): resending a control request (weights, pause, abort) is not safe.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import httpx

from slime_router.front import router_url
from slime_router.handlers import ROUTING_KEY_HEADER, SESSION_HEADER, Handler, Request, Response, error_response
from slime_router.workers import WorkerError, Workers

if TYPE_CHECKING:
    from slime_core.config import Config

log = logging.getLogger("slime_router.retry")
RETRIED_PATHS = frozenset({"/generate", "/v1/chat/completions", "/v1/completions"})
RETRIED_STATUSES = frozenset({500, 502, 503, 504})
RETRIES_HEADER = "x-slime-retries"
HEALTH_TIMEOUT_S = 2.0


def retry_middleware(next_handler: Handler, config: Config) -> Handler:
    attempts = 1 + config.router_middleware_retries
    timeout = config.router_middleware_timeout
    engines = DeadEngineRemover(Workers(router_url(config), api_key=config.network.token))

    async def retry(request: Request) -> Response:
        if request.path not in RETRIED_PATHS:
            return await next_handler(request)
        for attempt in range(attempts):
            response, failure = await _attempt(next_handler, request, timeout)
            if failure is None:
                return _count_retries(response, attempt)
            log.warning(
                "retry: %s %s failed (attempt %d of %d): %s",
                request.method,
                request.path,
                attempt + 1,
                attempts,
                failure,
            )
            if attempt + 1 < attempts and not await engines.remove_dead():
                request = _fresh_routing_key(request, attempt + 1)
        return response

    return retry


async def _attempt(next_handler: Handler, request: Request, timeout: float | None) -> tuple[Response, str | None]:
    """One try: the answer, and why it counts as failed (None if it did not fail)."""
    try:
        response = await asyncio.wait_for(next_handler(request), timeout)
    except asyncio.TimeoutError:
        failure = f"no answer within {timeout:g} s (--router-middleware-timeout)"
        return error_response(504, failure), failure
    if response.status in RETRIED_STATUSES:
        return response, f"{response.status} {response.error_message()[:300]}"
    return response, None


def _count_retries(response: Response, retries: int) -> Response:
    if retries:
        response.headers[RETRIES_HEADER] = str(retries)
    return response


def _fresh_routing_key(request: Request, attempt: int) -> Request:
    """The request with a routing key no engine is bound to yet (derived from its old one)."""
    key = request.headers.get(ROUTING_KEY_HEADER) or request.headers.get(SESSION_HEADER) or "request"
    return request.with_headers({ROUTING_KEY_HEADER: f"{key.split('~retry')[0]}~retry{attempt}"})


class DeadEngineRemover:
    """Finds the engines that no longer answer ``GET /health`` and removes them from sglang-router."""

    def __init__(self, workers: Workers):
        self.workers = workers
        self._lock = asyncio.Lock()  # concurrent failures share one check

    async def remove_dead(self) -> list[str]:
        """Remove the dead engines; return their URLs (empty when every engine answers)."""
        async with self._lock:
            return await asyncio.to_thread(self._remove_dead)

    def _remove_dead(self) -> list[str]:
        try:
            dead = [url for url in self.workers.urls() if not _answers_health(url)]
            for url in dead:
                self.workers.remove(url)
                log.warning("retry: engine %s does not answer GET /health; removed it from sglang-router", url)
        except WorkerError as exc:
            log.error("retry: could not check or remove the engines: %s", exc)
            return []
        return dead


def _answers_health(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=HEALTH_TIMEOUT_S, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False
