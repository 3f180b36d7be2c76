"""A stopped `slime run` (Ctrl-C, SIGTERM, SIGKILL) leaves no process behind and a checkpoint it resumes
from."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from slime_core.testing import alive, command_line

pytestmark = pytest.mark.integration


STOPPER = """
import json, os, signal, threading
from slime_core import hookimpl
from slime_core.testing import descendants

def _stop():
    with open(os.environ["STOP_RECORD"], "w") as out:
        json.dump(descendants(os.getpid()), out)
    os.kill(os.getpid(), getattr(signal, os.environ["STOP_SIGNAL"]))

def zero(sample, config):
    return 0.0

@hookimpl
def slime_register_reward_functions(register):
    register("zero", zero)

@hookimpl
def slime_before_train_step(rollout_id, step):
    if os.environ["STOP_PHASE"] == "training" and rollout_id == 1:
        threading.Timer(0.05, _stop).start()
"""


@pytest.mark.parametrize("stop_signal", ["SIGINT", "SIGKILL"])
def test_a_stopped_run_leaves_no_process_behind_and_a_resumable_checkpoint(
    request, monkeypatch, tmp_path, tiny_model_dir, stop_signal
):
    """Stopped in rollout 1 by Ctrl-C while training, `slime run` shuts its engines, router,
    train ranks and Ray down: no process it started outlives it; the checkpoint of rollout 0 is
    complete and a run resumes from it (a scheduler's SIGTERM takes the same path: next test;
    stopped while generating: tests/faults/test_ray_death.py's SIGTERM to the process group).
    Killed outright (SIGKILL), its engines, router and train ranks still die with it (Ray's two
    agents exit on their own within about a minute, so they are not counted)."""
    import shutil
    import tempfile

    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+1=", "label": str(a + 1)}) + "\n" for a in range(50)))
    (tmp_path / "stopper.py").write_text(STOPPER)
    ray_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit in 108 bytes
    record = tmp_path / "processes.json"
    env = dict(
        os.environ,
        HOME=ray_dir,
        RAY_TMPDIR=ray_dir,
        PYTHONPATH=str(tmp_path),
        STOP_SIGNAL=stop_signal,
        STOP_PHASE="training",
        STOP_RECORD=str(record),
    )
    flags = [
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--rollout-engine",
        "cpu",
        "--rm-type",
        "zero",
        "--rollout-batch-size",
        "4",
        "--n-samples-per-prompt",
        "2",
        "--rollout-max-response-len",
        "4",
        "--save-interval",
        "1",
        "--save",
        str(tmp_path / "ckpt"),
    ]
    command = [sys.executable, "-m", "slime_core.cli.main", "run", *flags, "-p", "stopper"]
    try:
        stopped = subprocess.run(
            [*command, "--num-rollout", "20", "--output-dir", str(tmp_path / "run")],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=_interruptible,
        )
        assert stopped.returncode == (-9 if stop_signal == "SIGKILL" else 130), stopped.stderr[-2000:]
        started = json.loads(record.read_text())
        assert len(started) >= 3  # Ray's processes, the train rank, the engine and the router at least
        ray_agents = ("ray::DashboardAgent", "ray::RuntimeEnvAgent") if stop_signal == "SIGKILL" else ()
        assert _left_running(started, ray_agents, within_s=5 if stop_signal == "SIGKILL" else 2) == []
        assert (tmp_path / "ckpt" / "rollout_state" / "iter_0000000.json").is_file()
        assert not (tmp_path / "ckpt" / "rollout_state" / "iter_0000001.json").exists()
        if stop_signal == "SIGINT":
            request.getfixturevalue("ray_cluster")  # resumed on this session's Ray: the stop is what is tested above
            monkeypatch.setenv("STOP_PHASE", "none")
            _run_here(
                [
                    *flags,
                    "--load",
                    str(tmp_path / "ckpt"),
                    "--num-rollout",
                    "2",
                    "--output-dir",
                    str(tmp_path / "resumed"),
                ],
                tmp_path / "stopper.py",
            )
            lines = (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()
            assert [json.loads(line)["rollout_id"] for line in lines] == [1]
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)


def _run_here(flags: list[str], plugin_file) -> None:
    """``slime run FLAGS`` in this process, with the hooks of ``plugin_file`` registered."""
    import importlib.util

    from slime_core.cli.run import run_command
    from slime_core.plugins import Plugins

    spec = importlib.util.spec_from_file_location(plugin_file.stem, plugin_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    plugins = Plugins()
    plugins.register_object(plugin_file.stem, module)
    try:
        assert run_command(flags, plugins) == 0
    finally:
        plugins.unregister(plugin_file.stem)


def test_sigterm_unwinds_like_ctrl_c_while_the_loop_runs():
    """SIGTERM raises KeyboardInterrupt inside the loop (so the stop above applies to it), and
    the handler that was there before (Ray's) is back afterwards."""
    from slime_core.loop.driver import _sigterm_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), _sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this
    assert signal.getsignal(signal.SIGTERM) is before


def _left_running(pids, ignored: tuple[str, ...], within_s: float) -> list[str]:
    """The command lines of ``pids`` still running ``within_s`` seconds from now (those starting
    with ``ignored`` not counted); returns as soon as none is."""
    deadline = time.monotonic() + within_s
    while True:
        running = [command_line(pid) for pid in pids if alive(pid) and not command_line(pid).startswith(ignored)]
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.1)


def _interruptible() -> None:
    """In the child, before exec: SIGINT back to its default, which Python turns into
    KeyboardInterrupt (a shell running the tests in the background passes SIGINT ignored)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
