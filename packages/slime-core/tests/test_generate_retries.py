"""``--generate-max-retries`` counts only the failures that no engine replacement explains: a
sample that keeps failing while the fault-tolerance monitor replaces its engine (a lost node
takes a while) is generated again as often as it takes; one that fails while every engine is
healthy runs out of retries."""

import asyncio
import threading
import time

import pytest

from slime_core.config import Config
from slime_core.engine import EngineUnavailable
from slime_core.loop.fault_tolerance import EngineMonitor
from slime_core.rollout.generate import generate_resilient
from slime_core.rollout.parts import GenerateContext
from slime_core.sample import Sample

RESTART_S = 1.5  # how long the replacement takes: longer than the sample's one retry would wait


class Engines:
    """One engine the test can kill; `restart` takes `RESTART_S` (as a start on a new node does)."""

    urls = ["engine://0"]

    def __init__(self):
        self.dead = False

    def health_problem(self, index, timeout):
        return "died" if self.dead else None

    def restart(self, index):
        time.sleep(RESTART_S)
        self.dead = False
        return self.urls[index]


class Router:
    def __init__(self):
        self.workers = list(Engines.urls)

    def remove_worker(self, url):
        self.workers.remove(url)

    def add_worker(self, url):
        self.workers.append(url)


class Weights:
    lock = threading.RLock()

    def push_to_engine(self, index, version):
        pass


class Colocation:
    enabled = False


@pytest.fixture
def monitored():
    """A running `EngineMonitor` over `Engines` (health checks every 0.2 s); its engines and
    the run's config (fault tolerance on, one retry)."""
    config = Config(
        {
            "use_fault_tolerance": True,
            "generate_max_retries": 1,
            "rollout_health_check_interval": 0.2,
            "rollout_health_check_timeout": 1.0,
            "max_engine_restarts": 3,
        }
    )
    engines, router, lines = Engines(), Router(), []
    monitor = EngineMonitor(
        config, engines, router, Weights(), Colocation(), version=lambda: 0, log=lines.append
    ).start()
    try:
        yield engines, config, monitor
    finally:
        monitor.stop()


def _generate(config, monitor, attempt):
    """`generate_resilient` of one sample whose generation is ``attempt(sample)``, with the
    monitor's check after an engine fault (as the driver hands it); its result."""

    async def generate(sample, sampling, ctx):
        attempt(sample)

    ctx = GenerateContext(None, None, config, engine_fault_handled=monitor.replaced_since_now)
    return asyncio.run(generate_resilient(Sample(prompt="1+1=", index=0, group_index=0), None, ctx, generate))


def test_failures_during_a_replacement_cost_no_retry(monitored):
    engines, config, monitor = monitored
    attempts = []

    def attempt(sample):
        attempts.append(time.monotonic())
        if len(attempts) == 1:  # the engine's node is lost under the first request
            engines.dead = True
        if engines.dead or monitor.restarts == 0:  # the router has no engine until the replacement is in
            sample.response = "lost"
            raise EngineUnavailable("engine://0 did not answer")
        sample.response = "2"

    started = time.monotonic()
    regenerated = _generate(config, monitor, attempt)
    assert monitor.restarts == 1 and regenerated == len(attempts) - 1 >= 1
    assert time.monotonic() - started >= RESTART_S  # it waited for the replacement, not its one retry's 1 s


def test_failures_while_every_engine_is_healthy_use_up_the_retries(monitored):
    engines, config, monitor = monitored
    attempts = []

    def attempt(sample):
        attempts.append(sample.response)
        sample.response = "half"
        raise EngineUnavailable("engine://0 answered 503")

    with pytest.raises(EngineUnavailable):
        _generate(config, monitor, attempt)
    assert attempts == ["", ""] and monitor.restarts == 0  # the first try and one retry, each from a fresh sample


def test_without_a_monitor_a_failure_is_nobody_s_to_handle():
    assert asyncio.run(GenerateContext(None, None, None).engine_fault_handled()) is False
