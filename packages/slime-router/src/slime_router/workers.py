"""sglang-router's worker API: which engines it routes to, and adding or removing one.

sglang-router (0.3) queues additions and removals (``POST /workers``, ``DELETE
/workers/{id}`` answer 202 at once), so each call here waits until ``GET /workers`` shows
the change, and says what to check when it does not.
"""

from __future__ import annotations

import time

import httpx

POLL_S = 0.05


class WorkerError(RuntimeError):
    """sglang-router refused or did not carry out a change to its engines."""


class Workers:
    """The engines behind the sglang-router at ``router_url``."""

    def __init__(self, router_url: str, timeout_s: float = 60.0, api_key: str | None = None):
        """``api_key``: the router's (a run's token when it spans nodes), sent with every call."""
        self.router_url = router_url.rstrip("/")
        self.timeout_s = timeout_s  # how long an addition or removal may take to show
        # one client for every call: a new one per request costs ~25 ms of CPU (its TLS context)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=10.0, trust_env=False, headers=headers)

    def listed(self) -> dict[str, dict]:
        """Engine URL -> sglang-router's record of it (``id``, ``is_healthy``, ``load``, ...)."""
        answer = self._call("GET", "/workers")
        return {_normal(worker["url"]): worker for worker in answer.json()["workers"]}

    def urls(self) -> list[str]:
        return sorted(self.listed())

    def add(self, url: str) -> None:
        """Route to the engine at ``url`` (no-op if it is listed already)."""
        url = _normal(url)
        if url in self.listed():
            return
        self._call("POST", "/workers", json={"url": url})
        self._wait(
            lambda: url in self.listed(),
            f"engine {url} did not join sglang-router at {self.router_url} within {self.timeout_s:.0f} s; "
            "is it running and answering GET /health? (the router retries it in the background)",
        )

    def remove(self, url: str) -> None:
        """Stop routing to the engine at ``url`` (no-op if it is not listed, e.g. already dropped)."""
        url = _normal(url)
        worker = self.listed().get(url)
        if worker is None:
            return
        self._call("DELETE", f"/workers/{worker['id']}")
        self._wait(
            lambda: url not in self.listed(),
            f"sglang-router at {self.router_url} still lists engine {url} {self.timeout_s:.0f} s after its removal",
        )

    def wait_listed(self, urls: list[str]) -> None:
        """Return once every engine in ``urls`` is listed (sglang-router registers the engines it
        was started with in the background)."""
        wanted = {_normal(url) for url in urls}
        self._wait(
            lambda: wanted <= set(self.listed()),
            f"sglang-router at {self.router_url} did not list the engines {sorted(wanted)} within "
            f"{self.timeout_s:.0f} s; are they running and answering GET /health?",
        )

    def _call(self, method: str, path: str, **kwargs) -> httpx.Response:
        where = f"sglang-router at {self.router_url}"
        try:
            answer = self._client.request(method, f"{self.router_url}{path}", **kwargs)
        except httpx.HTTPError as exc:
            raise WorkerError(f"{where} did not answer {method} {path} ({exc}); is it running?") from exc
        if answer.status_code >= 400:
            raise WorkerError(f"{where} refused {method} {path}: {answer.status_code} {answer.text[:300]}")
        return answer

    def _wait(self, done, message: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise WorkerError(message)
            time.sleep(POLL_S)


def _normal(url: str) -> str:
    return url.rstrip("/")
