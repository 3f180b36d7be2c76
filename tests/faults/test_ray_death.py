"""Ray itself is the fault: ``slime run`` as a user starts it (a subprocess with its own local
Ray, in a session of its own as a shell job is), then its whole process group gets SIGTERM,
or Ray's GCS is killed. Each test states what the user gets: the exit code and message, the
run directory's ``status.json``, the checkpoint of rollout 0 kept, and no process of the run
left (found by a marker in their environment, which every process the run starts inherits)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from slime_core.testing import command_line

pytestmark = pytest.mark.integration

#: How long the run may take to stop once the fault hit it (generous: a loaded 2-core CI).
STOP_BOUND_S = 60
#: The run's wait for a GCS that accepts no connection (``$SLIME_RAY_LOST_AFTER_S``; 10 s by default):
#: shorter here, the test's time; a live GCS accepts connections however loaded the machine is.
LOST_AFTER_S = 3
#: A plugin that holds rollout 1 in the middle (one reward waits for the test's go-ahead, other
#: groups still generating) so that the test can stop the run while it generates; as Ctrl-C would
#: stop it there (tests/test_loop_stop.py stops it while training).
HOLD_ROLLOUT_1 = """
import threading
import time
from pathlib import Path

from slime_core import hookimpl

MARKS = Path(__file__).parent
armed, first = threading.Event(), threading.Lock()


def held_while_scoring(sample, config):
    with first:
        hold = armed.is_set()
        armed.clear()
    if hold:
        (MARKS / "rollout-1-held").touch()
        deadline = time.monotonic() + 60
        while not (MARKS / "signalled").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return 0.0


@hookimpl
def slime_register_reward_functions(register):
    register("held_while_scoring", held_while_scoring)


@hookimpl
def slime_before_rollout(rollout_id, config):
    if rollout_id == 1:
        armed.set()
"""


class SlimeRun:
    """``slime run`` for 20 rollouts with a checkpoint after each, started as a process-group
    leader; `wait_for_rollout` waits until a rollout's metrics (and checkpoint) are written.
    ``hold_rollout_1``: with the `HOLD_ROLLOUT_1` plugin (`wait_until_held`)."""

    def __init__(self, tmp_path: Path, tiny_model_dir, hold_rollout_1: bool = False):
        data = tmp_path / "prompts.jsonl"
        data.write_text("".join(json.dumps({"prompt": f"{a}+1=", "label": str(a + 1)}) + "\n" for a in range(50)))
        self.ray_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit in 108 bytes
        self.marker = uuid.uuid4().hex
        self.run_dir, self.ckpt = tmp_path / "run", tmp_path / "ckpt"
        env = dict(os.environ, HOME=self.ray_dir, RAY_TMPDIR=self.ray_dir, SLIME_FAULT_TEST=self.marker)
        env["SLIME_RAY_LOST_AFTER_S"] = str(LOST_AFTER_S)
        self.marks, reward, plugin = tmp_path, ["--rm-type", "math"], []
        if hold_rollout_1:
            (tmp_path / "hold_rollout_1.py").write_text(HOLD_ROLLOUT_1)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
            reward, plugin = ["--rm-type", "held_while_scoring"], ["-p", "hold_rollout_1"]
        flags = [
            "--prompt-data",
            str(data),
            "--hf-checkpoint",
            str(tiny_model_dir),
            "--rollout-engine",
            "cpu",
            *reward,
            "--rollout-batch-size",
            "4",
            "--n-samples-per-prompt",
            "2",
            "--rollout-max-response-len",
            "4",
            "--num-rollout",
            "20",
            "--save-interval",
            "1",
            "--save",
            str(self.ckpt),
            "--output-dir",
            str(self.run_dir),
            *plugin,
        ]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "slime_core.cli.main", "run", *flags],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def wait_for_rollout(self, rollout_id: int, timeout_s: float = 240) -> None:
        deadline = time.monotonic() + timeout_s
        metrics = self.run_dir / "metrics.jsonl"
        while time.monotonic() < deadline and self.process.poll() is None:
            lines = metrics.read_text().splitlines() if metrics.is_file() else []
            if any(json.loads(line)["rollout_id"] == rollout_id for line in lines):
                return
            time.sleep(0.2)
        raise AssertionError(f"rollout {rollout_id} never finished: {self.finish(0)[1][-3000:]}")

    def wait_until_held(self, timeout_s: float = 240) -> None:
        """Wait until the `HOLD_ROLLOUT_1` plugin holds rollout 1 (`release` lets it go on)."""
        deadline = time.monotonic() + timeout_s
        while not (self.marks / "rollout-1-held").exists():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise AssertionError(f"rollout 1 was never held: {self.finish(0)[1][-3000:]}")
            time.sleep(0.05)

    def release(self) -> None:
        (self.marks / "signalled").touch()

    def processes(self) -> list[int]:
        """Pids of the live processes that this run started (its marker in their environment)."""
        found = []
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                if f"SLIME_FAULT_TEST={self.marker}".encode() in environ.read_bytes().split(b"\0"):
                    found.append(int(environ.parent.name))
            except OSError:
                continue
        return [pid for pid in found if command_line(pid)]

    def finish(self, timeout_s: float) -> tuple[int, str]:
        """The exit code and stderr once it exits within ``timeout_s`` (else it is killed: -9)."""
        try:
            _, stderr = self.process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            _, stderr = self.process.communicate()
        return self.process.returncode, stderr

    def left_running(self, within_s: float) -> list[str]:
        """Command lines of the run's processes still running ``within_s`` from now (returns
        as soon as none is)."""
        deadline = time.monotonic() + within_s
        while (running := [command_line(pid) for pid in self.processes()]) and time.monotonic() < deadline:
            time.sleep(0.2)
        return running

    def status(self) -> str:
        return json.loads((self.run_dir / "status.json").read_text())["status"]

    def cleanup(self) -> None:
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.ray_dir, ignore_errors=True)


@pytest.fixture
def slime_process(request, tmp_path, tiny_model_dir):
    """The run; ``@pytest.mark.parametrize("slime_process", [True], indirect=True)``: held in rollout 1."""
    run = SlimeRun(tmp_path, tiny_model_dir, hold_rollout_1=getattr(request, "param", False))
    try:
        yield run
    finally:
        run.cleanup()


@pytest.mark.parametrize("slime_process", [True], indirect=True, ids=["while-generating"])
def test_sigterm_to_the_whole_process_group_stops_every_part(slime_process):
    """What ``timeout``, ``kill -- -PGID`` and job schedulers send, here while rollout 1 generates.
    Ray's GCS and raylet are not in the driver's group, so they outlive the signal, and the driver
    stops every part (train rank, engine, router, Ray) as on Ctrl-C: exit 130, ``status:
    interrupted`` (a stop asked for from outside, which a resume continues from the last
    checkpoint; not a failure of the run), the checkpoint of rollout 0 whole and none of the
    stopped rollout 1, no process left behind."""
    run = slime_process
    run.wait_until_held()
    started = run.processes()
    assert len(started) >= 4  # Ray's GCS and raylet, the train rank, the engine, the router at least
    os.killpg(run.process.pid, signal.SIGTERM)
    hit = time.monotonic()
    run.release()
    code, stderr = run.finish(STOP_BOUND_S)
    assert code == 130, stderr[-3000:]
    assert time.monotonic() - hit < STOP_BOUND_S
    assert run.status() == "interrupted"
    assert run.left_running(within_s=10) == []
    assert (run.ckpt / "rollout_state" / "iter_0000000.json").is_file()
    assert (run.ckpt / "latest_checkpointed_iteration.txt").is_file()
    assert not (run.ckpt / "rollout_state" / "iter_0000001.json").exists()


def test_a_killed_gcs_stops_the_run_within_a_minute_naming_the_cluster(slime_process):
    """Ray's GCS killed mid-run (its head node lost): ``slime run`` notices within
    ``LOST_AFTER_S`` (3 s here, 10 s by default), stops without waiting on Ray, exits 1 naming the GCS's address,
    and leaves ``status: failed`` and the checkpoints it wrote."""
    run = slime_process
    run.wait_for_rollout(0)
    (gcs,) = [pid for pid in run.processes() if "gcs_server" in command_line(pid)]
    (port_file,) = (Path(run.ray_dir) / "session_latest").glob("gcs_server_port_*")
    os.kill(gcs, signal.SIGKILL)
    hit = time.monotonic()
    code, stderr = run.finish(STOP_BOUND_S)
    seconds = time.monotonic() - hit
    print(f"stopped {seconds:.1f} s after the GCS was killed")
    assert code == 1, stderr[-3000:]
    assert seconds < STOP_BOUND_S
    message = stderr.strip().splitlines()[-1]
    assert message.startswith("slime run: lost the Ray cluster: its GCS at ") and "resume with --load" in message
    assert message.split("its GCS at ")[1].split()[0].endswith(f":{port_file.read_text().strip()}")  # the one killed
    assert "Traceback" not in stderr
    assert run.status() == "failed"
    assert (run.ckpt / "rollout_state" / "iter_0000000.json").is_file()
    assert run.left_running(within_s=15) == []
