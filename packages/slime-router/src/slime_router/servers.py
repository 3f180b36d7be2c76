"""The router's server processes (sglang-router, the middleware front): waiting until one
answers, stopping it, and quoting its log when it fails."""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

#: "error: ..." (argparse), "ERROR ..." (sglang-router's log, maybe coloured), "... Error: ..." (a traceback)
ERROR_LINE = re.compile(r"(?i)\berror(:|\x1b|\s)")


class RouterError(RuntimeError):
    """sglang-router or the middleware front did not start."""


@dataclass
class Server:
    """A server started here (``process``), or one already running elsewhere (``process`` None)."""

    url: str
    what: str  # names it in errors: "sglang-router", "slime-router's middleware front"
    hint: str  # what to check when it does not start
    process: subprocess.Popen | None = None
    log_path: Path | None = None

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Return once ``GET /health`` answers 200; raise, quoting the log, if the process exits first.
        One client for every try (a new one per request costs ~25 ms of CPU for its TLS context)."""
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    raise RouterError(
                        f"{self.what} exited with code {self.process.returncode} before it was ready:\n"
                        f"{log_tail(self.log_path)}\n{self.hint}"
                    )
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        raise RouterError(
            f"{self.what} at {self.url} did not answer GET /health within {timeout_s:.0f} s:\n"
            f"{log_tail(self.log_path)}\n{self.hint}"
        )

    def stop(self) -> None:
        """Terminate the process started here and wait (kill it if it lingers); safe to call twice."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def log_tail(log_path: Path | None, lines: int = 8) -> str:
    """The last error lines of a log (its last lines when none is an error), for error messages."""
    if log_path is None or not log_path.is_file():
        return "(no log)"
    text = log_path.read_text(errors="replace").splitlines()
    errors = [line for line in text if ERROR_LINE.search(line)]
    return "\n".join((errors or text)[-lines:]) or "(empty log)"


def connect_host(host: str) -> str:
    """Where to connect for a server bound to ``host`` (a wildcard is reached on the loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, f"[{host}]" if ":" in host else host)
