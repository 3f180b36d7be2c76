"""``--use-fault-tolerance`` end to end: a real engine process is killed in the middle of a
rollout; the run replaces it and finishes with every sample. (A hung engine, replaced with its
weights by a gloo broadcast: ``tests/faults/test_engine_faults.py``.)"""

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from slime_core import hookimpl
from slime_core.testing import processes_running

pytestmark = pytest.mark.integration

FAULT_TOLERANCE = (
    "--use-fault-tolerance",
    "--rollout-health-check-interval",
    "0.5",
    "--rollout-health-check-timeout",
    "3",
    "--rollout-max-response-len",
    "48",
    "--num-rollout",
    "3",
    "--check-weight-update-equal",
)


class EngineFault:
    """In rollout 1, once the run's engine server is generating, kills it (SIGKILL)."""

    def __init__(self, model_dir):
        self.model_dir, self.hit = str(model_dir), []

    @hookimpl
    def slime_before_rollout(self, rollout_id, config):
        if rollout_id == 1:
            threading.Thread(target=self._hit, daemon=True).start()

    def _hit(self):
        (pid,) = processes_running("engine", "serve", self.model_dir)
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        url = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}/server_info"
        deadline = time.monotonic() + 60
        while httpx.get(url, timeout=10).json()["running_requests"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(pid, signal.SIGKILL)
        self.hit.append(pid)


def test_a_failed_engine_is_replaced_and_no_sample_is_lost(slime_run, tiny_model_dir):
    """The replacement gets the current weights by the run's transport (in memory here). With 8
    samples in flight a group of 8 is one request, lost and generated again as a whole."""
    fault = EngineFault(tiny_model_dir)
    records = slime_run(
        *FAULT_TOLERANCE, "--rollout-concurrency", "8", "--update-weight-transport", "tensor", hooks=[fault]
    )
    assert len(fault.hit) == 1
    assert [r["rollout_id"] for r in records] == [0, 1, 2]
    assert all(r["rollout/samples"] == 64 for r in records)  # 8 prompts x 8 samples in every rollout
    assert sum(r["fault/engine_restarts"] for r in records) == 1
    regenerated = records[1]["rollout/samples_regenerated"]  # the failed engine's requests, generated again
    assert regenerated > 0 and regenerated % 8 == 0
    assert records[-1]["weight_version"] == 3
    assert records[-1]["weight_update/max_logprob_diff"] < 1e-3  # the new engine serves the trainer's weights
    log = (slime_run.tmp_path / "run" / "slime.log").read_text()
    assert "died" in log and "[fault tolerance] engine 0 failed (http://" in log
    assert processes_running("engine", "serve", str(tiny_model_dir)) == []  # the failed one is gone too
