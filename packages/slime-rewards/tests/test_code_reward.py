"""The `code` reward: Python from the response, run against the sample's tests in a sandbox.

Every test here starts real sandbox processes. The hostile programs print what they managed
to do, so a failing test says which defence gave way.
"""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from slime_core import Sample
from slime_core.config import Config
from slime_core.plugins import Plugins
from slime_rewards import code_sandbox
from slime_rewards.code_sandbox import TestCase as Case  # renamed so that pytest does not collect it
from slime_rewards.code_sandbox import (
    Limits,
    SandboxError,
    extract_code,
    outputs_match,
    parse_tests,
    pass_fraction,
    passes,
    run_python,
)

FAST = Limits(timeout_s=1.0, memory_mb=256)
CONFIG = Config({"code_timeout": 1.0, "code_memory_mb": 256})


@pytest.fixture(scope="module")
def code_reward():
    return Plugins().registry("reward_functions").get("code")


def fenced(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{textwrap.dedent(code).strip()}\n```\n"


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


# --- grading -------------------------------------------------------------------------------

SQUARES_STDIN = [{"input": f"{n}\n", "output": f"{n * n}\n"} for n in (1, 2, 3, 4)]


def test_stdin_tests_score_the_pass_fraction(code_reward):
    right = fenced("n = int(input())\nprint(n * n)")
    partly = fenced("n = int(input())\nprint(n * n if n % 2 else n + n)")  # right for 1, 3 and 2
    crashes = fenced("n = int(input())\nprint(n * n)\nraise SystemExit(3)")
    assert code_reward(Sample(response=right, label=SQUARES_STDIN), CONFIG) == 1.0
    assert code_reward(Sample(response=partly, label=SQUARES_STDIN), CONFIG) == 0.75
    assert code_reward(Sample(response=crashes, label=SQUARES_STDIN), CONFIG) == 0.0


def test_assertion_tests_count_each_top_level_assert(code_reward):
    tests = "from math import isqrt\nassert square(2) == 4\nassert square(3) == 9\nassert isqrt(square(12)) == 12"
    wrong_for_odd = fenced("def square(n):\n    return n * n if n % 2 == 0 else n")
    sample = Sample(response=wrong_for_odd, label="unused", metadata={"tests": tests})
    assert code_reward(sample, CONFIG) == pytest.approx(2 / 3)
    assert code_reward(Sample(response=fenced("def square(n): return n ** 2"), label=tests), CONFIG) == 1.0


def test_every_test_format_grades_the_same(code_reward):
    response = fenced("a, b = map(int, input().split())\nprint(a + b)")
    formats = [
        [{"input": "1 2", "output": "3"}, {"input": "5 5", "output": "11"}],
        {"inputs": ["1 2", "5 5"], "outputs": ["3", "11"]},
        json.dumps({"inputs": ["1 2", "5 5"], "outputs": ["3", "11"]}),
    ]
    assert [code_reward(Sample(response=response, label=tests), CONFIG) for tests in formats] == [0.5] * 3
    asserts = ["assert add(1, 2) == 3", "assert add(5, 5) == 11"]
    add = fenced("def add(a, b):\n    return a + b")
    assert code_reward(Sample(response=add, label=asserts), CONFIG) == 0.5
    assert code_reward(Sample(response=add, label=json.dumps(asserts)), CONFIG) == 0.5


def test_no_code_block_scores_zero(code_reward):
    tests = [{"input": "2", "output": "4"}]
    draft_only_in_reasoning = "<think>\n```python\nprint(int(input()) ** 2)\n```\n</think>\nThe answer is to square n."
    truncated = "<think>```python\nprint(4)"
    for response in ("", "I would square the number and print it.", draft_only_in_reasoning, truncated):
        assert code_reward(Sample(response=response, label=tests), CONFIG) == 0.0, response


def test_a_stdin_program_is_main_and_reads_everything():
    code = "import sys\nif __name__ == '__main__':\n    print(sum(map(int, sys.stdin.read().split())))"
    assert passes(code, Case("1 2\n3\n", "6"), FAST)
    assert not passes(code.replace("'__main__'", "'solution'"), Case("1 2\n3\n", "6"), FAST)


def test_common_standard_library_idioms_still_work():
    code = """
        import sys, threading, tempfile, os, pathlib, random, logging, traceback
        from collections import namedtuple
        from dataclasses import dataclass
        from enum import Enum
        from typing import TypeVar
        from functools import lru_cache
        T = TypeVar("T")
        Point = namedtuple("Point", "x y")
        Colour = Enum("Colour", "RED GREEN")
        @dataclass
        class Box:
            size: int
        @lru_cache(None)
        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)
        with tempfile.TemporaryDirectory() as scratch:
            pathlib.Path(scratch, "notes").write_text("ok")
        try:
            1 / 0
        except ZeroDivisionError:
            traceback.print_exc()
        logging.warning("to stderr")
        sys.setrecursionlimit(100000)
        threading.stack_size(64 * 1024 * 1024)
        out = []
        worker = threading.Thread(target=lambda: out.append(depth(20000) + Box(random.randint(1, 1)).size))
        worker.start()
        worker.join()
        print(out[0], Point(1, 2).x, Colour.GREEN.value)
    """
    assert passes(textwrap.dedent(code), Case("", "20001 1 2"), FAST)


def test_extract_code_prefers_the_last_python_block_of_the_answer():
    response = "```python\nprint(1)\n```\ntext\n```py\nprint(2)\n```\nOutput:\n```\n2\n```"
    assert extract_code(response) == "print(2)\n"
    assert extract_code("```cpp\nint main(){}\n```") == "int main(){}\n"
    assert extract_code("<think>```python\nprint(0)\n```</think>```python\nprint(3)\n```") == "print(3)\n"
    assert extract_code("<think>hmm</think>\nprint(5)\n") == "print(5)"
    assert extract_code("<think>only thinking</think>  ") is None


@pytest.mark.parametrize(
    ("actual", "expected", "match"),
    [
        ("3\n", "3", True),
        ("1 2 \n3\n\n", "1 2\n3", True),
        ("1\n2 3", "1 2\n3", True),  # token by token
        ("0.3333333", "0.333333333", True),
        ("1e-7", "0", False),  # an integer is compared exactly
        ("0.0000001", "0.0", True),
        ("2", "2.0", True),
        ("1000000006", "1000000007", False),
        ("999999000", "1000000000", False),
        ("5.0", "5", False),
        ("+5", "5", True),
        ("YES", "yes", False),
        ("1 2", "1 2 3", False),
        ("nan", "nan", True),
        ("", "", True),
    ],
)
def test_outputs_match(actual, expected, match):
    assert outputs_match(actual, expected) is match


def test_parse_tests_splits_asserts_and_keeps_the_set_up():
    source = "import math\n@staticmethod\ndef helper(x):\n    return x\nassert f(1) == 1\nassert f(math.pi) > 3"
    tests = parse_tests(source)
    assert len(tests) == 2 and all("@staticmethod" in t.assertion and "import math" in t.assertion for t in tests)
    assert tests[1].assertion.endswith("assert f(math.pi) > 3")
    assert parse_tests("for x in range(3):\n    assert f(x) == x")[0].assertion.startswith("for x")


@pytest.mark.parametrize(
    ("tests", "message"),
    [
        ({"inputs": [[1, 2]], "outputs": [3], "fn_name": "add"}, "call-based tests"),
        ({"inputs": ["1", "2"], "outputs": ["1"]}, "shorter than argument 1"),
        ("   ", "the code tests are empty"),
        ([1, 2], "unrecognised code tests of type list"),
    ],
)
def test_unusable_tests_are_errors_not_zero_rewards(tests, message):
    with pytest.raises(ValueError, match=message):
        parse_tests(tests)


def test_no_tests_and_impossible_limits_are_errors():
    with pytest.raises(ValueError, match="at least one test case"):
        pass_fraction("print(1)", [], FAST)
    with pytest.raises(ValueError, match="--code-memory-mb to at least 32"):
        Limits(memory_mb=8)


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
