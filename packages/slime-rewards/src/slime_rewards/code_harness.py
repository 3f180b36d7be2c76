"""The program that runs inside the code sandbox: ``python -I -S -B code_harness.py CONFIG_FD STATUS_FD``.

Not imported by slime: `code_isolation` starts it in a fresh scratch directory, its working
directory (the *root* below), as a user and in namespaces of its own (`code_jail`) unless
``--code-isolation hooks``. It

1. reads its JSON configuration (solution, optional test code, limits, token) from an
   in-memory file, applies the resource limits (address space, CPU seconds, file size,
   processes where the sandbox has a user id of its own, no core dumps; soft = hard, so they
   cannot be raised), then writes ``started`` on the status pipe and closes it: from then on
   a failure is the solution's, and the solution can neither reread the configuration nor
   fake the signal;
2. compiles the solution and the test code (a syntax error is the solution's fault);
3. installs two audit hooks (PEP 578). Each is closed over everything it uses, so the
   solution cannot loosen them by changing this module's globals, ``os.path`` or builtins:

   - the *policy* refuses writing, creating, deleting, renaming or changing anything outside
     the root (paths are resolved without the disk, which is exact because the root cannot
     hold symlinks and the working directory cannot change), or through a file or directory
     descriptor; reading anything but the root, the standard library and a few devices
     (``/dev/null``, ``/dev/stdin``, ...), and opening directories outside the root (no
     descriptor-relative escapes); changing directory and symlinks; starting or signalling
     processes; native code (ctypes, cffi, C test modules, hand-made code objects); sockets;
     file locks; raising resource limits; and what could reach the token: new audit hooks,
     tracing, garbage-collector introspection and the other threads' frames. The calls
     that raise no audit event but create files anywhere or signal any process
     (``os.mknod``, ``os.mkfifo``, ``os.pidfd_open``) are removed instead;
   - the *completion* hook holds the token and writes it to stdout when the test code's
     last line, ``sys.audit("slime.tests_passed")``, runs in the test code's own frame.
     Exiting early, reading the harness's frames, or raising the event from anywhere else
     does not produce it, so the token on stdout proves that the test code ran to its end;

   These hooks are a first line only: memory corruption from pure Python (bytecode loaded
   with `marshal`) can switch them off, which is why the process around them is isolated;
4. runs the solution as ``__main__`` (stdin tests), or as module ``solution`` followed by
   the test code (assert tests) in a namespace of its own (`test_namespace`), whose
   rewritten asserts report their values (`reporter`, `plain_check`; see `code_checks`).

Exit status 121 means the harness itself failed (a sandbox fault, not a wrong answer).
"""

import json
import os
import resource
import sys

HARNESS_FAILED = 121
DONE_EVENT = "slime.tests_passed"
REPORT, CHECK, PLAIN = "slime-check", "__slime_check__", "__slime_plain__"  # as in code_checks
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_DENIED_EVENTS = frozenset(
    {
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "subprocess.Popen",
        "pty.spawn",
        "os.kill",
        "os.killpg",
        "signal.pthread_kill",
        "resource.setrlimit",
        "resource.prlimit",
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.cdata",
        "ctypes.call_function",
        "code.__new__",
        "sys.remote_exec",
        "sys.addaudithook",
        "sys.settrace",
        "sys.setprofile",
        "sys._current_frames",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "os.chdir",
        "os.symlink",
        "fcntl.flock",
        "fcntl.lockf",
        "fcntl.ioctl",
    }
)
# posix and _signal are loaded at start-up: importing them again would restore `_UNAUDITED`.
_DENIED_MODULES = frozenset(
    {
        "ctypes",
        "_ctypes",
        "_posixsubprocess",
        "cffi",
        "_cffi_backend",
        "_xxsubinterpreters",
        "posix",
        "_signal",
    }
)
# event → (indices of path arguments, which must lie inside the root; indices of dir_fd arguments)
_MUTATIONS = {
    "os.remove": ((0,), (1,)),
    "os.rmdir": ((0,), (1,)),
    "os.mkdir": ((0,), (2,)),
    "os.rename": ((0, 1), (2, 3)),
    "os.link": ((0, 1), (2, 3)),
    "os.chmod": ((0,), (2,)),
    "os.chown": ((0,), (3,)),
    "os.truncate": ((0,), ()),
    "os.utime": ((0,), (3,)),
    "os.setxattr": ((0,), ()),
    "os.removexattr": ((0,), ()),
    "shutil.rmtree": ((0,), (1,)),
    "shutil.copyfile": ((1,), ()),
    "shutil.move": ((0, 1), ()),
}
# Calls that raise no audit event but create files anywhere or signal any process we may signal.
_UNAUDITED = {
    "posix": ("mknod", "mkfifo", "pidfd_open"),
    "os": ("mknod", "mkfifo", "pidfd_open"),
    "_signal": ("pidfd_send_signal",),
    "signal": ("pidfd_send_signal",),
}
_READABLE_DEVICES = frozenset({"/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/stdin"})
_WRITABLE_DEVICES = frozenset({"/dev/null"})


def main() -> None:
    solution, test = prepare(int(sys.argv[1]), int(sys.argv[2]))
    sys.argv[:] = ["solution.py"]
    namespace = {"__name__": "__main__" if test is None else "solution", "__builtins__": __builtins__}
    if test is None:
        exec(solution, namespace)
        return
    builtins = dict(vars(__builtins__) if type(__builtins__) is not dict else __builtins__)
    exec(solution, namespace)
    exec(test, test_namespace(namespace, builtins))


def prepare(config_fd: int, status_fd: int):
    """Steps 1–3 of the module docstring; the token lives on only in the hooks' closures."""
    try:
        with open(config_fd, encoding="utf-8") as f:
            config = json.load(f)
        apply_limits(config)
        os.write(status_fd, b"started")  # from here on, a failure is the solution's
        os.close(status_fd)
    except (OSError, ValueError, KeyError) as error:
        sys.stderr.write(f"sandbox harness failed: {error}\n")
        sys.exit(HARNESS_FAILED)
    solution = compile(config["solution"], "solution.py", "exec")
    test = None
    if config.get("test") is not None:
        test = compile(f'{config["test"]}\n__import__("sys").audit("{DONE_EVENT}")\n', "test.py", "exec")
    confine(os.path.realpath(os.getcwd()), config.get("token", ""), test)
    return solution, test


def test_namespace(solution: dict, builtins: dict) -> dict:
    """The test code's globals: the solution's names, except those that hide a builtin,
    the builtins as they were before the solution ran (it cannot swap ``abs`` or ``all``
    for the test), and the two functions the rewritten asserts call (see `code_checks`)."""
    names = {k: v for k, v in solution.items() if type(k) is str and k not in builtins and not k.startswith("__")}
    names.update({"__name__": "__test__", "__builtins__": builtins, CHECK: reporter(), PLAIN: plain_check()})
    return names


def reporter():
    """``__slime_check__(index, values)``: one line ``slime-check [index, encoded values]`` on
    stdout (``null`` for a value that is not plain data). Calling it gives a program no more
    than printing that line would; the grader decides what a report is worth."""
    write, dumps, encode, failure = os.write, json.dumps, encoder(), Exception

    def check(index, values):
        try:
            encoded = [encode(value, 0) for value in values]
        except failure:
            encoded = None
        write(1, f"\n{REPORT} {dumps([index, encoded])}\n".encode())

    return check


def encoder():
    """``encode(value, depth)``: a JSON tree for a value made only of builtin plain data,
    chosen by its exact type (a subclass of int is refused), so no method the program
    defines runs; `code_checks.decode` reads it back."""
    type_, hex_, fromhex, items, refuse = type, hex, float.hex, dict.items, TypeError
    containers = {list: "L", tuple: "T", set: "S", frozenset: "Z"}

    def encode(value, depth):
        kind = type_(value)
        if depth > 100:
            raise refuse("nested too deep")
        if value is None or kind is bool:
            return ["N"] if value is None else ["B", value]
        if kind is int:
            return ["I", hex_(value)]
        if kind is float or kind is complex:
            return ["F", fromhex(value)] if kind is float else ["C", fromhex(value.real), fromhex(value.imag)]
        if kind is str or kind is bytes:
            return ["s", value] if kind is str else ["b", value.hex()]
        if kind is dict:
            return ["D", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in items(value)]]
        for container, tag in containers.items():
            if kind is container:
                return [tag, [encode(item, depth + 1) for item in value]]
        raise refuse(f"{kind.__name__} is not plain data")

    return encode


def plain_check():
    """``__slime_plain__(value)``: the value itself, unless it holds (in lists, tuples, sets,
    dicts) an instance of a class defined in Python, whose operators the program may have
    written; then a TypeError, and the assert fails."""
    type_, flags, heap, items, refuse = type, type.__dict__["__flags__"].__get__, 1 << 9, dict.items, TypeError
    containers = (list, tuple, set, frozenset)

    def walk(value, depth):
        kind = type_(value)
        if flags(kind) & heap or depth > 100:
            raise refuse(f"the tested code returned a {kind.__name__}, not plain data")
        if kind is dict:
            for k, v in items(value):
                walk(k, depth + 1)
                walk(v, depth + 1)
        elif kind is containers[0] or kind is containers[1] or kind is containers[2] or kind is containers[3]:
            for item in value:
                walk(item, depth + 1)

    def plain(value):
        walk(value, 0)
        return value

    return plain


def apply_limits(config: dict) -> None:
    """Lower every limit to the configured value (never above the current hard limit)."""
    limits = [
        (resource.RLIMIT_AS, config["memory_bytes"]),
        (resource.RLIMIT_CPU, int(config["cpu_seconds"])),
        (resource.RLIMIT_FSIZE, config["file_bytes"]),
        (resource.RLIMIT_CORE, 0),
    ]
    if config.get("processes") is not None:  # a user id of the sandbox's own: the count is its processes'
        limits.append((resource.RLIMIT_NPROC, config["processes"]))
    for which, value in limits:
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


def confine(root: str, token: str, test) -> None:
    """Remove `_UNAUDITED` and install the hooks of step 3 (the completion hook only for assert tests)."""
    for module, names in _UNAUDITED.items():
        for name in names:
            if hasattr(sys.modules.get(module), name):
                delattr(sys.modules[module], name)
    if test is not None:
        sys.addaudithook(completion_hook(token, test))
    readable = tuple(os.path.normpath(p) for p in sys.path if os.path.isabs(p))
    sys.addaudithook(policy_hook(root, readable))


def completion_hook(token: str, test):
    """The hook that writes the token once the last line of `test` runs in `test`'s frame."""
    getframe, write, failure, done = sys._getframe, os.write, OSError, DONE_EVENT
    last_line = max(line for _, _, line in test.co_lines() if line is not None)
    message = f"\n{token}\n".encode()

    def hook(event: str, args: tuple) -> None:
        if event == done:
            frame = getframe(1)
            if frame.f_code is test and frame.f_lineno == last_line:
                try:
                    write(1, message)
                except failure:
                    pass

    return hook


def policy_hook(root: str, readable: tuple):
    """The hook that refuses what the module docstring lists (step 3)."""
    denied_events, denied_modules, mutations = _DENIED_EVENTS, _DENIED_MODULES, dict(_MUTATIONS)
    refuse, startswith = PermissionError, str.startswith
    may_open, may_list, may_change = _access_rules(root, readable)

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            if not may_open(args[0], args[2]):
                raise refuse(f"sandbox: opening {args[0]!r} is not allowed here (only the working directory)")
        elif event in ("os.listdir", "os.scandir"):
            if not may_list(args[0]):
                raise refuse(f"sandbox: listing {args[0]!r} is not allowed (only the working directory)")
        elif event in mutations:
            paths, dir_fds = mutations[event]
            if not may_change(event, args, paths, dir_fds):
                raise refuse(f"sandbox: {event} outside the working directory is not allowed")
        elif event in denied_events:
            raise refuse(f"sandbox: {event} is not allowed")
        elif event == "import" and (args[0].partition(".")[0] in denied_modules or startswith(args[0], "_test")):
            raise refuse(f"sandbox: importing {args[0]} is not allowed")

    return hook


def _access_rules(root: str, readable: tuple):
    """``may_open(path, flags)``, ``may_list(path)`` and ``may_change(event, args, paths, dir_fds)``."""
    resolve, write_flags, stat, failure, type_, size = _resolver(root), _WRITE_FLAGS, os.stat, OSError, type, len
    readable_devices, writable_devices = _READABLE_DEVICES, _WRITABLE_DEVICES
    is_inside, is_readable = _under((root,)), _under((root, *readable))

    def may_open(path, flags) -> bool:
        if type_(path) is int:
            return True  # an existing descriptor: it can do no more than it already could
        where = resolve(path)
        if flags & write_flags:
            return is_inside(where) or where in writable_devices
        if is_inside(where) or where in readable_devices:
            return True
        if where is None or where != path or not is_readable(where):
            return False
        try:
            return stat(where).st_mode & 0o170000 != 0o040000  # no directory descriptors outside
        except failure:
            return True  # missing: the open itself fails

    def may_list(path) -> bool:
        if path is None or type_(path) is int:
            return True
        where = resolve(path)
        return is_inside(where) or (where == path and is_readable(where))

    def may_change(event: str, args: tuple, paths: tuple, dir_fds: tuple) -> bool:
        for i in dir_fds:
            if i < size(args) and args[i] is not None and args[i] != -1:
                return False
        for i in paths:
            if i < size(args) and not (event == "os.truncate" and type_(args[i]) is int):
                if not is_inside(resolve(args[i])):
                    return False
        return True

    return may_open, may_list, may_change


def _resolver(root: str):
    """A function from a path (str or bytes) to its absolute, normalised form, or None."""
    type_, text, raw = type, str, bytes

    def resolve(path):
        if type_(path) is raw:
            path = path.decode("utf-8", "surrogateescape")
        if type_(path) is not text:
            return None
        parts = []
        for part in (path if path.startswith("/") else root + "/" + path).split("/"):
            if part == "..":
                parts = parts[:-1]
            elif part and part != ".":
                parts.append(part)
        return "/" + "/".join(parts)

    return resolve


def _under(prefixes: tuple):
    """A function telling whether a resolved path is one of `prefixes` or inside one."""

    def inside(where) -> bool:
        if where is None:
            return False
        for prefix in prefixes:
            if where == prefix or where.startswith(prefix + "/"):
                return True
        return False

    return inside


if __name__ == "__main__":
    main()
