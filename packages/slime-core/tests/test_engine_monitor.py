"""`EngineMonitor`: a failed engine is replaced after one failed health check, unless the
weight lock held it up and the engine answered again meanwhile."""

import threading
import time

from slime_core.config.config import Config
from slime_core.loop.fault_tolerance import EngineMonitor


class Engines:
    """One engine that hangs on request; counts the health checks made while it hangs."""

    urls = ["http://engine-0"]

    def __init__(self):
        self.hung, self.checks_while_hung, self.restarted = False, 0, threading.Event()

    def health_problem(self, index, timeout):
        if not self.hung:
            return None
        self.checks_while_hung += 1
        return f"gave no answer to /health within {timeout:g} s (hung)"

    def restart(self, index):
        self.hung = False
        self.restarted.set()
        return "http://engine-0-again"


class Router:
    def remove_worker(self, url):
        pass

    def add_worker(self, url):
        pass


class Weights:
    def __init__(self):
        self.lock, self.pushed = threading.RLock(), []

    def push_to_engine(self, index, version):
        self.pushed.append((index, version))


class Colocation:
    enabled = False


def _monitor(engines, weights, lines, fault_tolerance=True):
    config = Config(
        {
            "use_fault_tolerance": fault_tolerance,
            "rollout_health_check_interval": 0.05,
            "rollout_health_check_timeout": 30.0,
            "max_engine_restarts": 3,
        }
    )
    return EngineMonitor(config, engines, Router(), weights, Colocation(), version=lambda: 7, log=lines.append).start()


def _wait(condition, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_a_hung_engine_is_replaced_after_one_failed_check():
    """A hung engine costs a whole health-check timeout per check (30 s by default): the
    replacement starts after the check that found it, with no second one."""
    engines, weights, lines = Engines(), Weights(), []
    monitor = _monitor(engines, weights, lines)
    try:
        engines.hung = True
        assert engines.restarted.wait(10)
        assert _wait(lambda: monitor.restarts == 1)
    finally:
        monitor.stop()
    assert engines.checks_while_hung == 1
    assert weights.pushed == [(0, 7)]  # the new engine gets the trainer's current weights
    assert lines[-1].startswith(
        "[fault tolerance] engine 0 failed (gave no answer to /health within 30 s (hung)): "
        "replaced by http://engine-0-again on weight version 7"
    )


def test_an_engine_that_answers_again_while_a_weight_update_held_it_up_is_kept():
    engines, weights, lines = Engines(), Weights(), []
    monitor = _monitor(engines, weights, lines)
    try:
        with weights.lock:  # a weight update is under way
            engines.hung = True
            assert _wait(lambda: engines.checks_while_hung >= 1)
            time.sleep(0.2)  # the monitor now waits for the lock
            engines.hung = False
        time.sleep(0.3)  # it checks again, and a few sweeps go by
    finally:
        monitor.stop()
    assert monitor.restarts == 0 and not engines.restarted.is_set() and weights.pushed == []


def test_without_fault_tolerance_a_failed_engine_stops_the_run_naming_it(monkeypatch):
    """The monitor watches every run: without --use-fault-tolerance it replaces nothing and
    stops the run (`stop_run`) with the engine's index and problem."""
    from slime_core.faults import run_fault
    from slime_core.faults.run_fault import stoppable, stopping_fault
    from slime_core.loop.fault_tolerance import EngineFailed

    monkeypatch.setattr(run_fault, "_fault", None)  # and back afterwards

    engines, weights, lines = Engines(), Weights(), []
    with stoppable():  # in the main thread: the monitor's stop interrupts it, as the driver's
        monitor = _monitor(engines, weights, lines, fault_tolerance=False)
        try:
            engines.hung = True
            time.sleep(10)  # interrupted
        except KeyboardInterrupt:
            pass
        finally:
            monitor.stop()
    fault = stopping_fault()
    assert isinstance(fault, EngineFailed) and not engines.restarted.is_set()
    assert str(fault) == (
        "rollout engine 0 failed: gave no answer to /health within 30 s (hung). The run stopped; "
        "--use-fault-tolerance replaces failed engines"
    )
