"""``--use-fault-tolerance``: replace rollout engines that die or hang, and keep the run going.

`EngineMonitor` is a background thread of the driver. Every ``--rollout-health-check-interval``
seconds it asks each engine for ``/health``; an engine that refuses the connection (its
process died) or gives no answer within ``--rollout-health-check-timeout`` seconds (it hangs)
is replaced:

1. the router stops sending it requests;
2. it is killed (SIGKILL, which also ends a stopped process) and a fresh engine starts in its
   place (``EngineGroup.restart``), on the initial weights;
3. the new engine gets the trainer's current weights by the run's transport, under the weight
   lock, so it never sees half an update (``WeightSync.push_to_engine``);
4. the router sends it requests again.

Requests that were in flight on the failed engine fail at the client (``EngineUnavailable``) and
their samples are generated again once an engine answers (``--generate-max-retries``), so a
rollout keeps its sample count. Each replacement is logged to ``slime.log`` and counted in
the next rollout's ``fault/engine_restarts``.
"""

from __future__ import annotations

import threading
import time

import httpx


class EngineMonitor:
    """Watches a run's engines and replaces failed ones (see the module docstring)."""

    def __init__(self, run):
        self.run = run
        self.interval = run.config.rollout_health_check_interval
        self.timeout = run.config.rollout_health_check_timeout
        self.max_restarts = run.config.max_engine_restarts
        self.restarts = 0  # replacements so far
        self.failure: BaseException | None = None  # why monitoring stopped, if it did
        self._reported = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="slime-engine-monitor", daemon=True)

    def start(self) -> EngineMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.timeout + 60)

    def metrics(self) -> dict[str, float]:
        """``fault/engine_restarts`` since the last call; raises if monitoring itself failed
        (e.g. more than ``--max-engine-restarts`` replacements), which ends the run."""
        if self.failure is not None:
            raise RuntimeError(f"engine fault tolerance gave up: {self.failure}") from self.failure
        restarts, self._reported = self.restarts - self._reported, self.restarts
        return {"fault/engine_restarts": float(restarts)}

    def after_replacements(self, call, attempts: int = 3, wait_s: float = 900.0):
        """``call()``; if an engine fails under it (a weight update to a dead engine), wait until
        the monitor has replaced an engine and call it again, ``attempts`` times at most."""
        from slime_sglang.client import EngineUnavailable

        for attempt in range(attempts):
            restarts = self.restarts
            try:
                return call()
            except EngineUnavailable as exc:
                if attempt + 1 == attempts:
                    raise
                self.run.run_dir.log(f"[fault tolerance] {exc}; waiting for the engine to be replaced")
                deadline = time.monotonic() + wait_s
                while self.restarts == restarts and self.failure is None and time.monotonic() < deadline:
                    time.sleep(0.2)
        raise AssertionError("unreachable")

    def _watch(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                for index, url in enumerate(list(self.run.engines.urls)):
                    problem = health_problem(url, self.timeout)
                    if problem and not self._stop.is_set():
                        self._replace(index, problem)
        except BaseException as exc:  # noqa: BLE001 - kept and raised in the driver by `metrics`
            self.failure = exc
            self.run.run_dir.log(f"[fault tolerance] stopped: {type(exc).__name__}: {exc}")

    def _replace(self, index: int, problem: str) -> None:
        run = self.run
        with run.weights.lock:  # no weight update or training step meanwhile
            if health_problem(run.engines.urls[index], self.timeout) is None:
                return  # it recovered while an update held the lock
            if self.restarts >= self.max_restarts:
                raise RuntimeError(f"engine {index} failed ({problem}) after {self.restarts} replacements "
                                   f"(--max-engine-restarts {self.max_restarts})")
            start, old = time.perf_counter(), run.engines.urls[index]
            run.router.remove_worker(old)
            new = run.engines.restart(index)
            run.weights.push_to_engine(new, run.version)
            if run.colocation.enabled and not run.colocation.engines_resident:
                run.rollouts.run(_release_memory(new))
            run.router.add_worker(new)
            self.restarts += 1
        run.run_dir.log(f"[fault tolerance] engine {index} at {old} {problem}: replaced by {new} on weight version "
                        f"{run.version} in {time.perf_counter() - start:.1f} s")


def health_problem(url: str, timeout: float) -> str | None:
    """Why the engine at ``url`` is failing (None when ``/health`` answers 200 in time)."""
    try:
        response = httpx.get(f"{url}/health", timeout=timeout, trust_env=False)
    except httpx.TimeoutException:
        return f"gave no answer to /health within {timeout:g} s (hung)"
    except httpx.HTTPError as exc:
        return f"did not answer /health ({type(exc).__name__}: died)"
    return None if response.status_code == 200 else f"answered /health with {response.status_code}"


async def _release_memory(url: str) -> None:
    from slime_sglang.engine_group import EngineGroup

    await EngineGroup([url]).release_memory()
