"""Watching a run's engines; with ``--use-fault-tolerance``, replacing those that die or hang.

`EngineMonitor` is a background thread of the driver. Every ``--rollout-health-check-interval``
seconds it asks the rollout backend about each engine (`Engines.health_problem`: for SGLang's
API, ``/health``, which the CPU engine answers only between two generation steps and with 503
while every step fails). Without ``--use-fault-tolerance``, an engine that died, gives no
answer within ``--rollout-health-check-timeout`` seconds (it hangs) or reports itself failing
stops the run (`EngineFailed`, through `slime_core.faults.run_fault.stop_run`: the rollout waiting on
it would otherwise wait for ever, or fail with the router's "no available workers"), naming
the engine, its answer and its log. With it, such an engine is replaced:

1. the router stops sending it requests;
2. the backend kills it and starts a fresh engine in its place (`Engines.restart`), on the
   initial weights;
3. the new engine gets the trainer's current weights by the run's transport, under the weight
   lock, so it never sees half an update (``WeightSync.push_to_engine``);
4. the router sends it requests again.

Requests that were in flight on the failed engine fail at the client
(`slime_core.engine.EngineUnavailable`) and their samples are generated again, so a rollout
keeps its sample count. A failed request asks the monitor to check the engines at once
(`EngineMonitor.replaced_since_now`, which the rollout's generate functions are handed as
``GenerateContext.engine_fault_handled``), and its sample waits for that check, and for any replacement it
starts: a failure that a replacement explains costs the sample none of its
``--generate-max-retries``; only failures while every engine answers ``/health`` count. So
losing a node, which takes Ray's health checks (about 30 s) plus an engine's start to
recover from, does not exhaust a sample's retries. Each replacement is logged to
``slime.log`` and counted in the next rollout's ``fault/engine_restarts``; once replacing gives
up (more than ``--max-engine-restarts``), the run stops with the last engine's problem.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from slime_core.engine import EngineUnavailable
from slime_core.faults.run_fault import RunFault, stop_run
from slime_core.rollout.engine_control import EngineControl

if TYPE_CHECKING:
    from slime_core.config import Config


class EngineFailed(RunFault):
    """An engine died, hangs or fails every request, and is not replaced; the message names it."""


class EngineMonitor:
    """Watches a run's engines and replaces failed ones (see the module docstring).

    ``engines`` (their control calls: `slime_core.rollout.engine_control.EngineControl`),
    ``router``, ``weights`` (`WeightSync`) and ``colocation`` are the run's parts; ``version()``
    is the trainer's current weight version, ``log`` writes a line to the run's log and
    ``replaced()`` (if given) is called after each replacement (the driver records the engines'
    nodes again: a replaced engine may run on another node when its own was lost)."""

    def __init__(
        self,
        config: Config,
        engines: EngineControl,
        router,
        weights,
        colocation,
        version: Callable[[], int],
        log: Callable[[str], None],
        replaced: Callable[[], None] | None = None,
    ):
        self.engines, self.router, self.weights, self.colocation = engines, router, weights, colocation
        self.version, self.log, self.replaced = version, log, replaced
        self.replaces = bool(config.get("use_fault_tolerance"))  # else a failed engine stops the run
        self.interval = config.rollout_health_check_interval
        self.timeout = config.rollout_health_check_timeout
        self.max_restarts = config.max_engine_restarts
        self.restarts = 0  # replacements so far
        self.failure: BaseException | None = None  # why monitoring stopped, if it did
        self._reported = 0
        self._sweeps_started = self._sweeps_done = 0  # health checks of every engine
        self._stop = threading.Event()
        self._check_now = threading.Event()  # a request failed: check without waiting for the interval
        self._thread = threading.Thread(target=self._watch, name="slime-engine-monitor", daemon=True)

    def start(self) -> EngineMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._check_now.set()
        self._thread.join(timeout=self.timeout + 60)

    async def replaced_since_now(self, poll_s: float = 0.1) -> bool:
        """After a request failed with `EngineUnavailable` (on the rollout loop, as
        ``GenerateContext.engine_fault_handled``): wait until a health check of every engine begun
        from now has finished (replacing those that failed, or stopping the run without
        ``--use-fault-tolerance``), or a replacement under way has, and say whether an engine was
        replaced meanwhile. True: the request is worth sending again without counting it as a
        retry; False: every engine was healthy, or the monitor has stopped (at once)."""
        sweep, restarts = self._sweeps_started, self.restarts
        self._check_now.set()
        while self._sweeps_done <= sweep and self.restarts == restarts and self._watches():
            await asyncio.sleep(poll_s)
        return self.restarts > restarts

    def _watches(self) -> bool:
        return not self._stop.is_set() and self.failure is None and self._thread.is_alive()

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
        for attempt in range(attempts):
            restarts = self.restarts
            try:
                return call()
            except EngineUnavailable as exc:
                if attempt + 1 == attempts:
                    raise
                self.log(f"[fault tolerance] {exc}; waiting for the engine to be replaced")
                deadline = time.monotonic() + wait_s
                while self.restarts == restarts and self.failure is None and time.monotonic() < deadline:
                    time.sleep(0.2)
        raise AssertionError("unreachable")

    def _watch(self) -> None:
        try:
            while True:
                self._check_now.wait(self.interval)
                self._check_now.clear()
                if self._stop.is_set():
                    return
                self._sweeps_started += 1
                for index in range(len(self.engines.urls)):
                    problem = self.engines.health_problem(index, self.timeout)
                    if problem and not self._stop.is_set():
                        self._replace(index, problem)
                self._sweeps_done = self._sweeps_started
        except BaseException as exc:  # noqa: BLE001 - kept, and the run stopped with it
            self.failure = exc
            if self.replaces:
                self.log(f"[fault tolerance] stopped: {type(exc).__name__}: {exc}")
            stop_run(exc if isinstance(exc, RunFault) else EngineFailed(f"engine fault tolerance gave up: {exc}"))

    @contextlib.contextmanager
    def _weights_held(self) -> Iterator[bool]:
        """Hold the weight lock; yields whether a weight update or training step held it first.
        Only then is a second health check worth its time: a hung engine costs a whole
        ``--rollout-health-check-timeout`` per check (30 s by default)."""
        if self.weights is None:  # no trainer (--debug-rollout-only): no weight update to wait for
            yield False
            return
        lock = self.weights.lock
        waited = not lock.acquire(blocking=False)
        if waited:
            lock.acquire()
        try:
            yield waited
        finally:
            lock.release()

    def _replace(self, index: int, problem: str) -> None:
        with self._weights_held() as waited:  # no weight update or training step meanwhile
            if waited and self.engines.health_problem(index, self.timeout) is None:
                return  # it recovered while an update held the lock
            if not self.replaces:
                raise EngineFailed(
                    f"rollout engine {index} failed: {problem}. The run stopped; "
                    "--use-fault-tolerance replaces failed engines"
                )
            if self.restarts >= self.max_restarts:
                raise EngineFailed(
                    f"rollout engine {index} failed ({problem}) after {self.restarts} replacements "
                    f"(--max-engine-restarts {self.max_restarts}); the run stopped"
                )
            start, old = time.perf_counter(), self.engines.urls[index]
            self.router.remove_worker(old)
            new = self.engines.restart(index)
            self.weights.push_to_engine(index, self.version())
            if self.colocation.enabled and not self.colocation.engines_resident:
                self.engines.only(index).release_memory()
            self.router.add_worker(new)
            self.restarts += 1
        self.log(
            f"[fault tolerance] engine {index} failed ({problem}): replaced by {new} on weight version "
            f"{self.version()} in {time.perf_counter() - start:.1f} s"
        )
        if self.replaced is not None:
            self.replaced()
