"""The program that runs inside the code sandbox: ``python -I -S -B code_harness.py CONFIG``.

Not imported by slime: `code_sandbox` starts it in a fresh scratch directory. It

1. reads its JSON configuration (solution, optional test code, limits, token) and deletes
   the file, so the solution cannot read the token from disk;
2. applies resource limits to itself (here rather than in ``preexec_fn``, which is unsafe
   when the parent process has threads): address space, CPU seconds, file size, process
   count, no core dumps; soft and hard limits are equal, so they cannot be raised;
3. installs an audit hook (PEP 578) that refuses: writes, deletions and renames outside the
   scratch directory; starting processes (fork, exec, spawn, subprocess, os.system);
   signalling other processes; loading native code (ctypes, cffi); sockets; and changing
   resource limits;
4. runs the solution as ``__main__`` (stdin tests) or as module ``solution`` followed by
   the test code, then prints the token on its own line (assert tests: reaching the token
   proves that every assertion ran and passed, not that the program exited early with 0).

Exit status 121 means the harness itself failed (a sandbox fault, not a wrong answer).
"""

import json
import os
import resource
import sys

HARNESS_FAILED = 121
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_DENIED_EVENTS = {
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill",
    "os.killpg", "signal.pthread_kill", "subprocess.Popen", "pty.spawn", "resource.setrlimit",
    "resource.prlimit", "socket.__new__", "socket.connect", "socket.bind", "ctypes.dlopen",
    "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function", "sys.remote_exec",
}
_DENIED_MODULES = {"ctypes", "_ctypes", "_posixsubprocess", "cffi", "_cffi_backend", "_xxsubinterpreters"}
# event → (indices of path arguments to check, indices of dir_fd arguments)
_PATH_EVENTS = {
    "os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)), "os.mkdir": ((0,), (2,)),
    "os.rename": ((0, 1), (2, 3)), "os.link": ((0, 1), (2, 3)), "os.symlink": ((1,), (2,)),
    "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)), "os.truncate": ((0,), ()),
    "os.utime": ((0,), (3,)), "os.mknod": ((0,), (3,)), "os.mkfifo": ((0,), (2,)),
    "os.setxattr": ((0,), ()), "os.removexattr": ((0,), ()), "shutil.rmtree": ((0,), (1,)),
    "shutil.copyfile": ((1,), ()), "shutil.move": ((0, 1), ()),
}


def main() -> None:
    config_path = sys.argv[1]
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
        os.remove(config_path)
        apply_limits(config)
    except (OSError, ValueError) as error:
        sys.stderr.write(f"sandbox harness failed: {error}\n")
        sys.exit(HARNESS_FAILED)
    sys.argv[:] = ["solution.py"]
    sys.dont_write_bytecode = True
    run(config["solution"], config.get("test"), config.get("token", ""))


def apply_limits(config: dict) -> None:
    """Lower every limit to the configured value (never above the current hard limit)."""
    cpu = int(config["cpu_seconds"])
    limits = [
        ("RLIMIT_AS", config["memory_bytes"]), ("RLIMIT_CPU", cpu), ("RLIMIT_FSIZE", config["file_bytes"]),
        ("RLIMIT_NPROC", config["processes"]), ("RLIMIT_CORE", 0),
    ]
    for name, value in limits:
        which = getattr(resource, name, None)
        if which is None:
            continue
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


def run(solution: str, test: str | None, token: str) -> None:
    """Compile first (a syntax error is the solution's fault), then confine, then execute."""
    code = compile(solution, "solution.py", "exec")
    test_code = compile(test, "test.py", "exec") if test else None
    confine(os.getcwd())
    namespace = {"__name__": "__main__" if test_code is None else "solution", "__builtins__": __builtins__}
    exec(code, namespace)
    if test_code is not None:
        exec(test_code, namespace)
        sys.stdout.flush()
        sys.stdout.write(f"\n{token}\n")
        sys.stdout.flush()


def confine(root: str) -> None:
    """Install the audit hook described in the module docstring."""
    root = os.path.realpath(root)

    def inside(path) -> bool:
        if path is None or isinstance(path, int):
            return True
        resolved = os.path.realpath(os.fsdecode(path))
        return resolved == root or resolved.startswith(root + os.sep)

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, _mode, flags = args
            if flags & _WRITE_FLAGS and not inside(path):
                raise PermissionError(f"sandbox: writing {path!r} outside the working directory is not allowed")
        elif event in _PATH_EVENTS:
            paths, dir_fds = _PATH_EVENTS[event]
            if any(args[i] not in (None, -1) for i in dir_fds if i < len(args)):
                raise PermissionError(f"sandbox: {event} relative to a directory descriptor is not allowed")
            if not all(inside(args[i]) for i in paths if i < len(args)):
                raise PermissionError(f"sandbox: {event} outside the working directory is not allowed")
        elif event in _DENIED_EVENTS:
            raise PermissionError(f"sandbox: {event} is not allowed")
        elif event == "import" and args[0].partition(".")[0] in _DENIED_MODULES:
            raise PermissionError(f"sandbox: importing {args[0]} is not allowed")

    sys.addaudithook(hook)


if __name__ == "__main__":
    main()
