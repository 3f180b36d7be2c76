"""Starting one sandboxed run of the harness, isolated by the operating system or not.

``namespaces`` (the default, `--code-isolation`): the harness starts under `unshare` in its
own mount, pid, network, IPC and UTS namespaces, and `code_jail` gives it a root of its own
(the interpreter read-only, the scratch directory writable, nothing else), a user id of its
own with no capabilities and ``no_new_privs``. As root (containers, CI) it needs
CAP_SYS_ADMIN; as any other user, unprivileged user namespaces (``unshare --user``), which
most Linux hosts allow. Where neither works, every run is refused with the fix (and `slime
run` says so before it starts), never silently weakened.

``hooks``: the harness alone, as the grader's user, confined only by its audit hooks and
resource limits. A program that gets past the hooks (bytecode smuggled in with `marshal`,
say) can then do what the grader's user can; for trusted code, or hosts that grant no
namespaces.

Both: a clean environment, its own session (killed as a whole at the time limit), the
configuration through an in-memory file and a pipe on which the harness says it started,
stdout and stderr to files outside the scratch directory.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HARNESS = Path(__file__).with_name("code_harness.py")
JAIL = Path(__file__).with_name("code_jail.py")
OUTPUT_LIMIT_BYTES = 4 * 1024 * 1024
#: Seconds a sandbox may take to set itself up (a loaded machine takes a while), on top of the time limit.
STARTUP_LIMIT_S = 60.0
ISOLATIONS = ("namespaces", "hooks")
#: Sandbox user ids: one at random per run from this range, used by no account, so that
#: `RLIMIT_NPROC` counts that run's processes alone.
UID_BASE, UID_COUNT = 1 << 30, 1 << 24
#: Processes and threads a sandbox with a user id of its own may have (`RLIMIT_NPROC`).
PROCESSES = 64
_BINDS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_NAMESPACES = ("--mount", "--pid", "--net", "--ipc", "--uts", "--fork", "--kill-child")
_USER_NAMESPACE = ("--user", "--map-root-user")  # without root: root of a namespace of our own, for the mounts


@dataclass(frozen=True)
class RunResult:
    """What one sandboxed run did."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool


class SandboxError(RuntimeError):
    """The sandbox itself failed (could not start or set up), as opposed to a wrong program."""


def launch(
    base: Path, work: Path, config: dict, isolation: str, timeout: float, deadline: float | None = None
) -> RunResult:
    """Run the harness on `config` in `work`: at most `timeout` seconds from the moment the
    harness starts (setting the sandbox up does not count), and in all not past `deadline`
    (a `time.monotonic()` value) if given. A run the deadline stops before it started is
    just timed out; a sandbox that fails to start otherwise raises SandboxError."""
    command, cwd = _command(base, work, isolation)
    config_fd = os.memfd_create("slime-code-config")
    status_read, status_write = os.pipe()
    try:
        with open(config_fd, "w", encoding="utf-8", closefd=False) as f:
            json.dump({**config, "processes": PROCESSES if isolation == "namespaces" else None}, f)
        os.lseek(config_fd, 0, os.SEEK_SET)
        with _outputs(base) as files:
            process = _start(command + [str(config_fd), str(status_write)], cwd, work, files, (config_fd, status_write))
            os.close(status_write)
            status_write = None
            started, timed_out = _wait(process, status_read, timeout, deadline)
    finally:
        for fd in (config_fd, status_read, status_write):
            if fd is not None:
                os.close(fd)
    result = RunResult(process.returncode, _read(base / "stdout"), _read(base / "stderr"), timed_out)
    if not started and not (timed_out and deadline is not None and time.monotonic() >= deadline):
        raise SandboxError(_setup_failure(result, isolation))
    return result


def _wait(process: subprocess.Popen, status: int, timeout: float, deadline: float | None) -> tuple[bool, bool]:
    """Wait for the harness's start signal, then for the run; kill what is left. Returns
    (started, timed_out)."""
    last = time.monotonic() + STARTUP_LIMIT_S if deadline is None else min(time.monotonic() + STARTUP_LIMIT_S, deadline)
    poller = select.poll()
    poller.register(status, select.POLLIN)
    readable = bool(poller.poll(max(last - time.monotonic(), 0) * 1000))
    started = readable and os.read(status, 16) == b"started"  # b"": it exited before starting
    timed_out = not readable
    if started:
        limit = timeout if deadline is None else min(timeout, deadline - time.monotonic())
        try:
            process.wait(timeout=max(limit, 0))
        except subprocess.TimeoutExpired:
            timed_out = True
    _kill_group(process)
    return started, timed_out


def _command(base: Path, work: Path, isolation: str) -> tuple[list[str], Path]:
    python = os.path.realpath(sys.executable)
    flags = [python, "-I", "-S", "-B", "-X", "utf8"]
    if isolation == "hooks":
        return [*flags, str(HARNESS)], work
    check_namespaces()
    root = base / "root"
    root.mkdir(mode=0o700)
    prefixes = {os.path.realpath(sys.base_prefix), os.path.dirname(python)}
    user_namespace = os.geteuid() != 0
    uid = UID_BASE + secrets.randbelow(UID_COUNT)
    binds = os.pathsep.join([*_BINDS, *sorted(p for p in prefixes if not p.startswith("/usr/"))])
    namespaces = [*_USER_NAMESPACE, *_NAMESPACES] if user_namespace else list(_NAMESPACES)
    jail = [*flags, str(JAIL), str(root), str(work), str(HARNESS), str(uid), str(int(user_namespace)), binds]
    return [shutil.which("unshare"), *namespaces, "--", *jail, "--", *flags, "/harness.py"], base


def check_namespaces() -> None:
    """Raise SandboxError naming the fix when the namespaces isolation cannot work here."""
    problem = _namespaces_problem()
    if problem:
        raise SandboxError(
            f"the code sandbox's namespaces isolation cannot work here: {problem}; allow user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1, or run as root with CAP_SYS_ADMIN), or pass --code-isolation "
            "hooks to run the code under audit hooks and resource limits only, which a determined program can undo"
        )


@functools.cache
def _namespaces_problem() -> str | None:
    """Why this process cannot make the sandbox's namespaces (None: it can), tried once."""
    if shutil.which("unshare") is None:
        return "util-linux's `unshare` is not installed"
    user = _USER_NAMESPACE if os.geteuid() != 0 else ()
    probe = subprocess.run([shutil.which("unshare"), *user, *_NAMESPACES, "--", "true"], capture_output=True, text=True)
    return f"`unshare` failed: {probe.stderr.strip()[-200:]}" if probe.returncode != 0 else None


@contextlib.contextmanager
def _outputs(base: Path):
    """The run's stdin, stdout and stderr files, outside the scratch directory."""
    with open(base / "stdin", "rb") as stdin, open(base / "stdout", "wb") as stdout:
        with open(base / "stderr", "wb") as stderr:
            yield stdin, stdout, stderr


def _start(command: list[str], cwd: Path, work: Path, files: tuple, fds: tuple) -> subprocess.Popen:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(work),
        "TMPDIR": str(work),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }
    stdin, stdout, stderr = files
    try:
        return subprocess.Popen(
            command, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=True, pass_fds=fds
        )
    except OSError as error:
        raise SandboxError(f"could not start the code sandbox ({command[0]}): {error}") from error


def _setup_failure(result: RunResult, isolation: str) -> str:
    what = f"could not set itself up (exit {result.returncode})"
    if result.timed_out:
        what = f"did not start within {STARTUP_LIMIT_S}s"
    return f"the code sandbox ({isolation}) {what}: {result.stderr.strip()[-300:]}"


def _kill_group(process: subprocess.Popen) -> None:
    """Kill everything left in the sandbox's session (the program and any children)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _read(path: Path) -> str:
    with open(path, "rb") as f:
        return f.read(OUTPUT_LIMIT_BYTES).decode("utf-8", errors="replace")
