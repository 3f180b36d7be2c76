"""Start ``slime engine serve`` as a subprocess and wait until it answers ``/health``.

For tests, benchmarks and local runs that want a CPU engine in its own process (the model
then runs beside, not inside, the caller's Python).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from slime_core.cluster.engine_servers import wait_healthy
from slime_core.cluster.ports import free_port


def start_cpu_engine(
    model: str | Path, port: int | None = None, *extra: str, log_path: Path | None = None
) -> tuple[subprocess.Popen, str]:
    """Start the engine on 127.0.0.1 and ``port`` (None: a free one; ``extra``: more
    ``slime engine serve`` flags, not ``--host`` / ``--port``); returns the process and its URL.

    Its output goes to ``log_path`` (default: discarded). Call :func:`wait_healthy` next.
    """
    port = port or free_port()
    slime = Path(sys.executable).with_name("slime")
    command = [str(slime), "engine", "serve", "--model", str(model), "--port", str(port), *extra]
    if log_path is None:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    else:
        with open(log_path, "ab") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    return process, f"http://127.0.0.1:{port}"


def stop(*processes: subprocess.Popen) -> None:
    """Terminate the processes (all at once, then wait; kill those that linger)."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def cpu_engine(model: str | Path, *extra: str, log_path: Path | None = None) -> Iterator[str]:
    """A running CPU engine on a free port, stopped on exit; yields its URL."""
    process, url = start_cpu_engine(model, None, *extra, log_path=log_path)
    try:
        wait_healthy(process, url)
        yield url
    finally:
        stop(process)
