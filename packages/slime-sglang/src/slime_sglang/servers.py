"""Engine servers as child processes of Ray actors: real SGLang on GPUs, the CPU engine elsewhere.

`EngineServer` is the Ray actor of one engine. It starts the server with the command of its
kind, a registered rollout engine (``sglang``: ``python -m sglang.launch_server`` on the
actor's GPUs with every ``--sglang-*`` option passed through; ``cpu``: ``slime engine
serve``; a plugin's: ``command(config, model_path, port) -> argv``), waits until
``/health`` answers, and stops it on `shutdown`. The server dies with its actor: it runs in
its own process group and gets SIGTERM from the kernel when the actor's process exits
(``PR_SET_PDEATHSIG``), so a crashed run leaves no orphan server behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

from slime_core.ports import free_port
from slime_sglang.cpu_engine.launch import wait_healthy

_PR_SET_PDEATHSIG = 1


def sglang_command(config, model_path: str, port: int) -> list[str]:
    """``sglang.launch_server`` for one engine; ``config.sglang`` holds the pass-through options."""
    command = [sys.executable, "-m", "sglang.launch_server", "--model-path", model_path, "--host", "127.0.0.1",
               "--port", str(port), "--tp-size", str(config.rollout_num_gpus_per_engine)]
    for key, value in config.sglang.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            command.append(flag)
        elif value not in (False, None):
            command += [flag, *(map(str, value) if isinstance(value, (list, tuple)) else [str(value)])]
    return command


def cpu_engine_command(config, model_path: str, port: int) -> list[str]:
    """``slime engine serve`` for one CPU engine."""
    slime = str(Path(sys.executable).with_name("slime"))
    return [slime, "engine", "serve", "--model", model_path, "--host", "127.0.0.1", "--port", str(port)]


class EngineServer:
    """One engine server (a Ray actor: ``ray.remote(num_gpus=...)(EngineServer)``)."""

    def __init__(self, config, command_fn, model_path: str, startup_timeout: float = 600.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = command_fn(config, model_path, self.port)
        self.log_path = Path(os.environ.get("SLIME_ENGINE_LOG_DIR", "/tmp")) / f"slime-engine-{self.port}.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent
            )
        try:
            wait_healthy(self.process, self.url, startup_timeout)
        except (RuntimeError, TimeoutError) as exc:
            self.shutdown()
            raise RuntimeError(f"{exc} (log: {self.log_path})") from exc

    def address(self) -> str:
        return self.url

    def pid(self) -> int:
        return self.process.pid

    def shutdown(self) -> None:
        """Stop the server's whole process group (SIGTERM, then SIGKILL after 10 s)."""
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the parent (the actor) dies."""
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
