"""``--use-fault-tolerance`` end to end: a real engine process is killed (or stopped, so it
hangs) in the middle of a rollout; the run replaces it and finishes with every sample."""

import os
import signal
import threading

import pytest

from slime_core import hookimpl
from slime_core.testing import processes_running

pytestmark = pytest.mark.integration

FAULT_TOLERANCE = ("--use-fault-tolerance", "--rollout-health-check-interval", "0.5",
                   "--rollout-health-check-timeout", "3", "--rollout-max-response-len", "48",
                   "--rollout-concurrency", "4", "--num-rollout", "3", "--check-weight-update-equal")


class EngineFault:
    """One second into rollout 1, sends ``signum`` to the run's engine server: SIGKILL (it
    dies) or SIGSTOP (it hangs: the process is there, but nothing answers)."""

    def __init__(self, model_dir, signum):
        self.model_dir, self.signum, self.hit = str(model_dir), signum, []

    @hookimpl
    def slime_before_rollout(self, rollout_id, config):
        if rollout_id == 1:
            threading.Timer(1.0, self._hit).start()

    def _hit(self):
        (pid,) = processes_running("engine", "serve", self.model_dir)
        os.kill(pid, self.signum)
        self.hit.append(pid)


@pytest.mark.parametrize("signum,transport", [(signal.SIGKILL, "tensor"), (signal.SIGSTOP, "broadcast")],
                         ids=["killed", "hung"])
def test_a_failed_engine_is_replaced_and_no_sample_is_lost(slime_run, tiny_model_dir, signum, transport):
    """The replacement gets the current weights by the run's transport: in memory, or by a
    gloo broadcast (a new group: the old one had the failed engine in it)."""
    fault = EngineFault(tiny_model_dir, signum)
    records = slime_run(*FAULT_TOLERANCE, "--update-weight-transport", transport, hooks=[fault])
    assert len(fault.hit) == 1
    assert [r["rollout_id"] for r in records] == [0, 1, 2]
    assert all(r["rollout/samples"] == 64 for r in records)  # 8 prompts x 8 samples in every rollout
    assert sum(r["fault/engine_restarts"] for r in records) == 1
    assert records[1]["rollout/samples_regenerated"] > 0  # the failed engine's requests, generated again
    assert records[-1]["weight_version"] == 3
    assert records[-1]["weight_update/max_logprob_diff"] < 1e-3  # the new engine serves the trainer's weights
    log = (slime_run.tmp_path / "run" / "slime.log").read_text()
    assert ("(hung)" if signum == signal.SIGSTOP else "died") in log and "[fault tolerance] engine 0 at" in log
    assert processes_running("engine", "serve", str(tiny_model_dir)) == []  # the failed one is gone too
