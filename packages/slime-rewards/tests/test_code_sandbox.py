"""The `code` reward's sandbox against hostile programs: faked passes, endless loops, sleep,
fork bombs, memory hogs, output floods, file access outside its directory, the grader's
environment, and programs posing as sandbox faults.

Every test here starts real sandbox processes. The hostile programs print what they managed
to do, so a failing test says which defence gave way.
"""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from slime_rewards import code_sandbox
from slime_rewards.code_sandbox import TestCase as Case  # renamed so that pytest does not collect it
from slime_rewards.code_sandbox import Limits, SandboxError, pass_fraction, passes, run_python

FAST = Limits(timeout_s=1.0, memory_mb=256)


def sandboxed(code: str, limits: Limits = FAST, stdin: str = ""):
    """Run `code` in the sandbox; return the result and the wall time it took."""
    start = time.perf_counter()
    result = run_python(textwrap.dedent(code), stdin, limits)
    return result, time.perf_counter() - start


def outcomes_of(output: str) -> dict[str, str]:
    """The ``name: outcome`` lines a hostile program printed."""
    return dict(line.split(": ", 1) for line in output.splitlines() if ": " in line)


def session_members(session: int) -> list[int]:
    """Pids of the live (not zombie) processes in `session`, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == session and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def is_gone(pid: int) -> bool:
    """Whether `pid` has exited (reaped, or a zombie waiting for its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


# --- assertion tests cannot be faked ---------------------------------------------------

FAILING_TEST = Case(assertion="assert add(1, 2) == 3\nassert add(2, 2) == 4")

CHEATS = {
    "exit early with success": "import os\nos._exit(0)",
    "sys.exit(0) before the tests": "import sys\nsys.exit(0)",
    "steal the token from the harness's frames": """
        import os, re, sys
        def strings(value, depth=0):
            if isinstance(value, (str, bytes)):
                yield value if isinstance(value, str) else value.decode(errors="replace")
            elif isinstance(value, dict) and depth < 3:
                for item in list(value.values()):
                    yield from strings(item, depth + 1)
            elif isinstance(value, (list, tuple)) and depth < 3:
                for item in list(value):
                    yield from strings(item, depth + 1)
        frame = sys._getframe()
        while frame is not None:
            for value in list(frame.f_locals.values()) + list(frame.f_globals.values()):
                for text in strings(value):
                    for token in re.findall(r"[0-9a-f]{32}", text):
                        print(token)
            frame = frame.f_back
        sys.stdout.flush()
        os._exit(0)
    """,
    "raise the completion event itself": """
        import os, sys
        sys.audit("slime.tests_passed")
        sys.stdout.flush()
        os._exit(0)
    """,
    "have the test frame raise it, then exit 0 on the failure": """
        import functools, os, sys
        sys.excepthook = lambda *args: os._exit(0)
        add = functools.partial(sys.audit, "slime.tests_passed")
    """,
    "search the heap through the garbage collector": """
        import gc, os, sys
        for thing in gc.get_objects():
            if callable(thing) and getattr(thing, "__closure__", None):
                for cell in thing.__closure__:
                    if isinstance(cell.cell_contents, bytes):
                        print(cell.cell_contents.decode())
        sys.stdout.flush()
        os._exit(0)
    """,
    "read its own memory": """
        import os, re, sys
        with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb") as mem:
            for line in maps:
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                try:
                    mem.seek(start)
                    for token in re.findall(rb"[0-9a-f]{32}", mem.read(end - start)):
                        print(token.decode())
                except OSError:
                    pass
        sys.stdout.flush()
        os._exit(0)
    """,
    "trace the test and jump over the assertions": """
        import sys
        def tracer(frame, event, arg):
            if frame.f_code.co_filename == "test.py" and event == "line":
                frame.f_lineno = 3
            return tracer
        sys.settrace(tracer)
        def add(a, b):
            return 0
    """,
    "install an audit hook to watch the harness": """
        import sys
        sys.addaudithook(lambda event, args: print(sys._getframe(1).f_locals))
        def add(a, b):
            return 0
    """,
}


@pytest.mark.parametrize("cheat", list(CHEATS))
def test_a_failing_solution_cannot_fake_passing_assertions(cheat):
    code = textwrap.dedent(CHEATS[cheat])
    assert pass_fraction(code, [FAILING_TEST], FAST) == 0.0


def test_assertion_tests_pass_even_when_the_program_prints_after_them():
    code = "import atexit\natexit.register(print, 'bye')\nprint('no newline', end='')\ndef add(a, b):\n    return a + b"
    assert passes(code, FAILING_TEST, FAST)


# --- limits and containment ------------------------------------------------------------


def test_an_endless_loop_is_stopped_at_the_time_limit_and_killed():
    spin = "import os\nprint(os.getpid(), flush=True)\nwhile True:\n    pass"
    result, elapsed = sandboxed(spin, Limits(timeout_s=0.5))
    assert result.timed_out and 0.5 <= elapsed < 2.0
    assert is_gone(int(result.stdout.split()[0]))
    assert not passes("while True:\n    pass", Case("", ""), Limits(timeout_s=0.5))


def test_a_sleeping_program_is_stopped_at_the_time_limit():
    result, elapsed = sandboxed("import time\ntime.sleep(30)", Limits(timeout_s=0.5))
    assert result.timed_out and elapsed < 2.0


FORK_BOMB = """
    import os, sys
    print("pid:", os.getpid(), flush=True)
    def attempt(name, start):
        try:
            start()
            print(f"{name}: started", flush=True)
        except BaseException as error:
            print(f"{name}: refused {type(error).__name__}", flush=True)
    def bomb():
        while True:
            os.fork()
    def multiprocess():
        import multiprocessing
        multiprocessing.Process(target=bomb).start()
    def subprocess_run():
        import subprocess
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    def posix_spawn():
        os.posix_spawn("/bin/sleep", ["sleep", "30"], {})
    def pty_fork():
        import pty
        pty.fork()
    attempt("fork", bomb)
    attempt("multiprocessing", multiprocess)
    attempt("subprocess", subprocess_run)
    attempt("posix_spawn", posix_spawn)
    attempt("spawnv", lambda: os.spawnv(os.P_NOWAIT, "/bin/sleep", ["sleep", "30"]))
    attempt("system", lambda: os.system("sleep 30 &"))
    attempt("exec", lambda: os.execv("/bin/sleep", ["sleep", "30"]))
    attempt("pty", pty_fork)
    while True:
        pass
"""
FORK_ATTEMPTS = ("fork", "multiprocessing", "subprocess", "posix_spawn", "spawnv", "system", "exec", "pty")

# Before bombing: try to switch the audit hook off by emptying every container in the
# harness module and by replacing what a naive hook would call at run time.
DISARM = """
    import builtins, os, sys
    harness = vars(sys.modules["__main__"])
    for name, value in list(harness.items()):
        if isinstance(value, (set, dict, list)) and not name.startswith("__"):
            value.clear()
        elif isinstance(value, frozenset):
            harness[name] = frozenset()
    harness.update(_WRITE_FLAGS=0, DONE_EVENT="open")
    os.path.realpath = lambda path, **kwargs: os.getcwd()
    builtins.any = lambda iterable: False
    builtins.all = lambda iterable: True
"""


@pytest.mark.parametrize("disarm", [False, True], ids=["plain", "after-disarming-the-hook"])
def test_a_fork_bomb_is_contained_and_leaves_no_process(disarm):
    code = (textwrap.dedent(DISARM) if disarm else "") + textwrap.dedent(FORK_BOMB)
    result, elapsed = sandboxed(code, Limits(timeout_s=1.0))
    outcomes = outcomes_of(result.stdout)
    harness = int(outcomes.pop("pid"))
    assert result.timed_out and elapsed < 3.0
    assert outcomes == {name: "refused PermissionError" for name in FORK_ATTEMPTS}, result.stderr
    assert is_gone(harness) and session_members(harness) == []


def test_a_memory_hog_hits_the_memory_limit_quickly():
    hog = """
        chunks = []
        try:
            while True:
                chunks.append(bytearray(8 * 1024 * 1024))
        except MemoryError:
            print(len(chunks) * 8)
    """
    result, elapsed = sandboxed(hog, Limits(timeout_s=5.0, memory_mb=64))
    assert result.returncode == 0 and elapsed < 3.0
    assert 0 < int(result.stdout) < 64
    assert not passes("x = bytearray(1 << 30)\nprint('allocated')", Case("", "allocated"), Limits(memory_mb=64))


def test_a_flood_of_output_is_cut_off_by_the_file_size_limit():
    result, elapsed = sandboxed("while True:\n    print('x' * 1000)", Limits(timeout_s=5.0, file_mb=1))
    assert result.returncode != 0 and not result.timed_out and elapsed < 3.0
    assert len(result.stdout) <= 1024 * 1024


# --- files and environment -------------------------------------------------------------

ESCAPES = """
    import builtins, os, pathlib, shutil, stat
    outside = {outside!r}
    victim = os.path.join(outside, "victim")
    def attempt(name, action):
        try:
            action()
            print(f"{{name}}: done", flush=True)
        except BaseException as error:
            print(f"{{name}}: refused {{type(error).__name__}}", flush=True)
    def descriptor_relative():
        directory = os.open(outside, os.O_RDONLY)
        os.close(os.open("created", os.O_WRONLY | os.O_CREAT, dir_fd=directory))
    def directory_descriptor():
        directory = os.open(os.path.dirname(os.__file__), os.O_RDONLY)
        os.close(os.open({planted!r}, os.O_WRONLY | os.O_CREAT, dir_fd=directory))
    def symlink_then_write():
        os.symlink(victim, "link")
        open("link", "w").write("overwritten")
    def hard_link_then_write():
        os.link(victim, "hard")
        open("hard", "w").write("overwritten")
    def change_directory_then_write():
        os.chdir(outside)
        open("created", "w").write("x")
    def mkfifo():
        os.mkfifo(os.path.join(outside, "created"))
    def mknod():
        os.mknod("device", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    def disarmed(action):  # with the builtins a naive hook would call replaced
        def run():
            saved = dict(vars(builtins))
            for name in ("len", "type", "isinstance", "any", "all", "PermissionError"):
                setattr(builtins, name, lambda *args, **kwargs: 0)
            try:
                action()
            finally:
                vars(builtins).update(saved)
        return run
    open("mine.txt", "w").write("inside is fine")
    open(b"bytes.txt", "w").write("bytes paths too")
    attempt("absolute", lambda: open(os.path.join(outside, "created"), "w").write("x"))
    attempt("bytes", lambda: open(os.fsencode(os.path.join(outside, "created")), "w").write("x"))
    attempt("relative", lambda: open(os.path.relpath(os.path.join(outside, "created")), "w").write("x"))
    attempt("append", lambda: open(victim, "a").write("x"))
    attempt("pathlib", lambda: pathlib.Path(outside, "created").write_text("x"))
    attempt("mkdir", lambda: os.makedirs(os.path.join(outside, "created")))
    attempt("remove", lambda: os.remove(victim))
    attempt("rename-out", lambda: os.rename("mine.txt", os.path.join(outside, "created")))
    attempt("copy-out", lambda: shutil.copy("mine.txt", os.path.join(outside, "created")))
    attempt("chmod", lambda: os.chmod(victim, 0o777))
    attempt("fchmod", lambda: os.fchmod(0, 0o777))  # stdin: a file of the grader's
    attempt("stdlib-dir_fd", directory_descriptor)
    attempt("utime", lambda: os.utime(victim, (0, 0)))
    attempt("dir_fd", descriptor_relative)
    attempt("symlink", symlink_then_write)
    attempt("hardlink", hard_link_then_write)
    attempt("chdir", change_directory_then_write)
    attempt("mkfifo", mkfifo)
    attempt("mknod", mknod)
    attempt("disarmed-remove", disarmed(lambda: os.remove(victim)))
    attempt("disarmed-write", disarmed(lambda: open(os.path.join(outside, "created"), "w")))
    attempt("read", lambda: open(victim).read())
    attempt("list", lambda: os.listdir(outside))
    print("inside:", open("mine.txt").read(), "/", open("bytes.txt").read())
"""


def test_the_program_cannot_touch_files_outside_its_directory(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("original")
    victim.chmod(0o600)
    before = (victim.stat().st_mode, victim.stat().st_mtime_ns)
    planted = Path(os.__file__).with_name(f"slime-sandbox-escape-{os.getpid()}")
    try:
        result, _ = sandboxed(ESCAPES.format(outside=str(tmp_path), planted=planted.name))
        assert not planted.exists()
    finally:
        planted.unlink(missing_ok=True)
    outcomes = outcomes_of(result.stdout)
    assert outcomes.pop("inside") == "inside is fine / bytes paths too", result.stderr
    assert len(outcomes) == 23 and all(o.startswith("refused") for o in outcomes.values()), outcomes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim"]
    assert victim.read_text() == "original" and (victim.stat().st_mode, victim.stat().st_mtime_ns) == before


def test_the_scratch_directory_is_private_and_removed(tmp_path):
    result, _ = sandboxed("import os\nopen('left.txt', 'w').write('x')\nprint(os.getcwd())")
    scratch = Path(result.stdout.strip())
    assert scratch.name == "work" and not scratch.parent.exists()


SNOOP = """
    import os
    def attempt(name, read):
        try:
            print(f"{name}: {read()!r}", flush=True)
        except BaseException as error:
            print(f"{name}: refused {type(error).__name__}", flush=True)
    attempt("environ", lambda: os.environ.get("SLIME_TEST_SECRET"))
    attempt("own-proc", lambda: open("/proc/self/environ", "rb").read())
    attempt("parent-proc", lambda: open(f"/proc/{os.getppid()}/environ", "rb").read())
    attempt("parent-cmdline", lambda: open(f"/proc/{os.getppid()}/cmdline", "rb").read())
    attempt("keys", lambda: sorted(os.environ))
"""


def test_the_program_sees_a_clean_environment_not_the_graders():
    """The grader runs in its own process, started with a secret in its environment."""
    grader = f"from slime_rewards.code_sandbox import run_python\nprint(run_python({textwrap.dedent(SNOOP)!r}).stdout)"
    env = {**os.environ, "SLIME_TEST_SECRET": "hunter2-" + "x" * 16}
    output = subprocess.run([sys.executable, "-c", grader], env=env, capture_output=True, text=True, timeout=30).stdout
    outcomes = outcomes_of(output)
    assert "hunter2" not in output
    assert outcomes["environ"] == "None"
    assert outcomes["keys"] == "['HOME', 'LANG', 'LC_ALL', 'PATH', 'TMPDIR']"
    assert [outcomes[k].split()[0] for k in ("own-proc", "parent-proc", "parent-cmdline")] == ["refused"] * 3


# --- sandbox faults ---------------------------------------------------------------------


def test_a_sandbox_that_cannot_start_raises_instead_of_scoring_zero(monkeypatch, tmp_path):
    monkeypatch.setattr(code_sandbox, "HARNESS", tmp_path / "missing_harness.py")
    with pytest.raises(SandboxError, match="could not set itself up"):
        run_python("print(1)", "", FAST)


def test_a_program_pretending_to_be_a_sandbox_fault_is_just_wrong():
    fake = "import sys\nsys.stderr.write('sandbox harness failed: no\\n')\nsys.exit(121)"
    result, _ = sandboxed(fake)
    assert result.returncode == 121
    assert pass_fraction(fake, [Case("", "")], FAST) == 0.0
