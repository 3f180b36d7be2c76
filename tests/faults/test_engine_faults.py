"""Faults of the rollout engines and train ranks, injected into a real run (``slime run`` on this
session's Ray, FSDP train ranks, the CPU engine behind sglang-router): an engine whose every
request fails, an engine whose scheduler hangs while its HTTP side still answers, a train rank
killed mid-step. Each test states what the user gets: exit code, the message naming the part
and its own error, ``status.json``, the engine's log in the run directory, and the checkpoint of
rollout 0 kept."""

import asyncio
import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from slime_core import hookimpl
from slime_core.testing import processes_running
from slime_sglang.cpu_engine.scheduler import HANG_FILE_ENV

pytestmark = pytest.mark.integration

#: The file whose appearance hangs a CPU engine's scheduler (tests only: see
#: `slime_sglang.cpu_engine.scheduler`). Set while this module is collected, before the
#: session's Ray starts, so that every engine of the session sees it; only the file's
#: appearance, which these tests cause, hangs an engine.
HANG_FILE = Path(f"/tmp/slime-hang-{os.getpid()}")
os.environ[HANG_FILE_ENV] = str(HANG_FILE)

WATCHED = (
    "--rollout-health-check-interval",
    "0.5",
    "--rollout-health-check-timeout",
    "3",
    "--rollout-max-response-len",
    "48",
    "--save-interval",
    "1",
)
#: How long a run may take to stop once the fault hit it (generous: a loaded 2-core CI).
STOP_BOUND_S = 60


def engine_url(model_dir) -> str:
    """The URL of the run's one CPU engine (from its command line)."""
    (pid,) = processes_running("engine", "serve", str(model_dir))
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"


def wait_generating(url: str) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while httpx.get(f"{url}/server_info", timeout=10).json()["running_requests"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)


class AtRollout1:
    """Runs ``fault(config)`` in a thread when rollout 1 starts; records when it hit."""

    def __init__(self, fault):
        self.fault, self.hit = fault, []

    @hookimpl
    def slime_before_rollout(self, rollout_id, config):
        if rollout_id == 1:
            threading.Thread(target=self._hit, args=(config,), daemon=True).start()

    def _hit(self, config):
        self.fault(config)
        self.hit.append(time.monotonic())


def hang_scheduler(model_dir):
    """Once the engine is generating, its scheduler's next step never ends; /health is asked."""

    def fault(config):
        wait_generating(engine_url(model_dir))
        HANG_FILE.touch()

    return fault


def failing_run(slime_run, capsys, *flags, hooks) -> tuple[str, Path]:
    """A run that must stop with exit code 1; its last stderr line and its run directory."""
    records = slime_run(*flags, hooks=hooks, exit_code=1)
    assert [r["rollout_id"] for r in records] == [0]  # rollout 0 finished before the fault
    message = capsys.readouterr().err.strip().splitlines()[-1]
    run_dir = slime_run.tmp_path / "run"
    assert json.loads((run_dir / "status.json").read_text())["status"] == "failed"
    assert (run_dir / "checkpoints" / "rollout_state" / "iter_0000000.json").is_file()  # what was saved stays
    return message, run_dir


def test_a_hung_engine_scheduler_is_replaced_with_fault_tolerance(slime_run, tiny_model_dir):
    """The scheduler thread stuck in a step while the event loop answers: /health waits for the
    scheduler, so the health check times out, the monitor replaces the engine, and the run
    finishes with every sample. The replacement gets the current weights by a gloo broadcast (a
    new group: the old one had the hung engine in it); with 4 samples in flight, a group's samples
    go one by one. (A killed engine, weights in memory: ``tests/test_fault_tolerance.py``.)"""
    fault = AtRollout1(hang_scheduler(tiny_model_dir))
    records = slime_run(
        *WATCHED,
        "--use-fault-tolerance",
        "--num-rollout",
        "3",
        "--rollout-concurrency",
        "4",
        "--update-weight-transport",
        "broadcast",
        "--check-weight-update-equal",
        hooks=[fault],
    )
    assert len(fault.hit) == 1
    assert [r["rollout_id"] for r in records] == [0, 1, 2] and all(r["rollout/samples"] == 64 for r in records)
    assert sum(r["fault/engine_restarts"] for r in records) == 1
    assert records[1]["rollout/samples_regenerated"] > 0  # the hung engine's requests, generated again
    assert records[-1]["weight_version"] == 3
    assert records[-1]["weight_update/max_logprob_diff"] < 1e-3  # the new engine serves the trainer's weights
    run_dir = slime_run.tmp_path / "run"
    assert "[fault tolerance] engine 0 failed (http://" in (run_dir / "slime.log").read_text()
    assert "within 3 s (hung)" in (run_dir / "slime.log").read_text()
    assert "this step never ends" in (run_dir / "engines" / "engine_0.log").read_text()  # the failed engine's log
    assert processes_running("engine", "serve", str(tiny_model_dir)) == []  # the hung one is gone too


def test_a_hung_engine_scheduler_stops_a_run_without_fault_tolerance(slime_run, tiny_model_dir, capsys):
    """Without --use-fault-tolerance the rollout would wait for the hung engine for ever; the
    engine monitor stops the run within the health check's interval and timeout, naming the
    engine, why, and its log."""
    fault = AtRollout1(hang_scheduler(tiny_model_dir))
    message, run_dir = failing_run(slime_run, capsys, *WATCHED, "--num-rollout", "3", hooks=[fault])
    assert time.monotonic() - fault.hit[0] < STOP_BOUND_S
    assert message.startswith("slime run: rollout engine 0 failed: http://127.0.0.1:")
    assert "gave no answer to /health within 3 s (hung)" in message
    assert f"its log: {run_dir / 'engines' / 'engine_0.log'}" in message and "--use-fault-tolerance" in message


def test_an_engine_failing_every_request_stops_the_run_naming_it_and_its_error(slime_run, tiny_model_dir, capsys):
    """The engine's weights overflow (pushed to it directly, as a broken update would): every
    generation step fails with torch's own error while the process is fine. The run does not
    end on sglang-router's "no available workers" but names the engine, its error and its log,
    which is in the run directory."""
    import torch

    from slime_sglang.client import EngineClient

    def overflow(config):
        client = EngineClient(engine_url(tiny_model_dir), api_key=config.network.token)
        hidden = torch.full((64,), 3e38)  # the final norm's weight: every logit inf, finite weights
        asyncio.run(client.update_weights_from_tensor([("model.norm.weight", hidden)], "overflowed"))

    fault = AtRollout1(overflow)
    message, run_dir = failing_run(slime_run, capsys, *WATCHED, "--num-rollout", "3", hooks=[fault])
    assert time.monotonic() - fault.hit[0] < STOP_BOUND_S
    assert message.startswith("slime run: rollout engine 0 failed: http://127.0.0.1:")
    assert "answered /health with 503" in message and "probability tensor contains either" in message
    log = run_dir / "engines" / "engine_0.log"
    assert f"its log: {log}" in message and "probability tensor contains either" in log.read_text()


class KillRankMidStep:
    """As rollout 1's first optimizer step starts, SIGKILLs the last started of the run's train
    ranks (in the hook itself: a timer could fire after a tiny model's step had finished)."""

    SIGNAL = signal.SIGKILL

    def __init__(self):
        self.killed = []

    @hookimpl
    def slime_before_train_step(self, rollout_id, step):
        if rollout_id == 1 and step == 0:
            self._kill()

    def _kill(self):
        from ray._private import state

        ranks = [
            actor
            for actor in state.actors().values()
            if actor["ActorClassName"].endswith("RankProcess") and actor["State"] == "ALIVE"
        ]
        pid = max(ranks, key=lambda actor: actor["StartTime"])["Pid"]
        os.kill(pid, self.SIGNAL)
        self.killed.append(pid)
        self.hit = time.monotonic()


@pytest.mark.parametrize("fault_tolerance", [False, True], ids=["plain", "fault-tolerance"])
def test_a_train_rank_killed_mid_step_stops_the_run_naming_it(slime_run, capsys, fault_tolerance):
    """Its peer waits for it in a collective; the driver does not wait for the peer but names
    the rank that died. --use-fault-tolerance replaces engines, not ranks: the same stop."""
    fault = KillRankMidStep()
    flags = ["--use-fault-tolerance"] if fault_tolerance else []
    message, _ = failing_run(
        slime_run, capsys, *WATCHED, *flags, "--num-rollout", "3", "--actor-num-gpus-per-node", "2", hooks=[fault]
    )
    assert len(fault.killed) == 1 and time.monotonic() - fault.hit < STOP_BOUND_S
    assert message.startswith("slime run: train rank ") and " of 2 (pid " in message, message
    assert f"(pid {fault.killed[0]} on " in message and "died during train_step" in message
    assert "not replaced (--use-fault-tolerance replaces rollout engines only)" in message


class StopRankMidStep(KillRankMidStep):
    """As rollout 1's first optimizer step starts, SIGSTOPs the last started train rank: alive
    to Ray, silent to its peer, which waits for it in the step's collectives."""

    SIGNAL = signal.SIGSTOP


def test_a_hung_train_rank_stops_the_run_after_the_distributed_timeout_naming_it(slime_run, capsys, monkeypatch):
    """--distributed-timeout-minutes bounds the peer's wait in a collective; the driver then
    names the rank that never answered (before it, the run waited for torch's 30 minutes).
    The driver's wait for a death that Ray might still report (``LOST_RANK_WAIT_S``, 10 s, which a
    hung rank always takes in full) is 1 s here: the peer's failed call is in by then."""
    from slime_core import train_backend

    monkeypatch.setattr(train_backend, "LOST_RANK_WAIT_S", 1.0)
    fault = StopRankMidStep()
    try:
        message, _ = failing_run(
            slime_run,
            capsys,
            *WATCHED,
            "--num-rollout",
            "3",
            "--actor-num-gpus-per-node",
            "2",
            "--distributed-timeout-minutes",
            "0.2",
            hooks=[fault],
        )
    finally:
        for pid in fault.killed:
            try:
                os.kill(pid, signal.SIGCONT)  # a rank the run failed to stop would hang on
            except ProcessLookupError:
                pass
    assert len(fault.killed) == 1 and 12 <= time.monotonic() - fault.hit < 12 + STOP_BOUND_S
    hung = re.match(r"slime run: train rank\(s\) ([01]) of 2 did not answer train_step: hung", message)
    assert hung, message
    assert f"rank {1 - int(hung[1])} gave up waiting for them after --distributed-timeout-minutes" in message
    assert "Timed out waiting 12000ms" in message  # the peer's own error: 0.2 minutes
