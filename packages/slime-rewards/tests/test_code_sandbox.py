"""The `code` reward's sandbox against hostile programs (faked passes and overridden
comparisons: `test_code_grading.py`): endless loops, sleep, fork bombs, memory hogs, output
floods, file access outside its directory, a program that switches the audit hooks off, the
grader's environment, and programs posing as sandbox faults.

Every test here starts real sandbox processes. The hostile programs print what they managed
to do, so a failing test says which defence gave way.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from slime_rewards import code_isolation
from slime_rewards.code_sandbox import Limits, SandboxError, pass_fraction, passes, run_python
from slime_rewards.code_sandbox import TestCase as Case  # renamed so that pytest does not collect it

FAST = Limits(timeout_s=1.0, memory_mb=256)


def sandboxed(code: str, limits: Limits = FAST, stdin: str = ""):
    """Run `code` in the sandbox; return the result and the wall time it took."""
    start = time.perf_counter()
    result = run_python(textwrap.dedent(code), stdin, limits)
    return result, time.perf_counter() - start


def outcomes_of(output: str) -> dict[str, str]:
    """The ``name: outcome`` lines a hostile program printed."""
    return dict(line.split(": ", 1) for line in output.splitlines() if ": " in line)


def sandbox_processes(work: str) -> list[int]:
    """Pids of the live (not zombie) processes whose HOME is `work`, a sandbox's scratch
    directory: the sandbox's own, seen from here (inside, the program is process 1 of its
    own pid namespace, so a pid it prints means nothing out here)."""
    members = []
    for entry in Path("/proc").iterdir():
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            zombie = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except (OSError, IndexError):
            continue
        if f"HOME={work}".encode() in environ and not zombie:
            members.append(int(entry.name))
    return members


# --- limits and containment ------------------------------------------------------------


def test_an_endless_loop_is_stopped_at_the_time_limit_and_killed():
    spin = "import os\nprint(os.getcwd(), flush=True)\nwhile True:\n    pass"
    result, elapsed = sandboxed(spin, Limits(timeout_s=0.5))
    assert result.timed_out and 0.5 <= elapsed < 2.0
    assert sandbox_processes(result.stdout.split()[0]) == []
    assert not passes("while True:\n    pass", Case("", ""), Limits(timeout_s=0.5))


def test_a_sleeping_program_is_stopped_at_the_time_limit():
    result, elapsed = sandboxed("import time\ntime.sleep(30)", Limits(timeout_s=0.5))
    assert result.timed_out and elapsed < 2.0


FORK_BOMB = """
    import os, sys
    print("home:", os.getcwd(), flush=True)
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
    home = outcomes.pop("home")
    assert result.timed_out and elapsed < 3.0
    # pty fails before its fork: the sandbox has no /dev/ptmx
    assert outcomes == {name: "refused PermissionError" for name in FORK_ATTEMPTS} | {"pty": "refused OSError"}, (
        result.stderr
    )
    assert sandbox_processes(home) == []


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


# Gets past the audit hooks from pure Python: bytecode loaded with marshal reads a pointer
# out of bounds (LOAD_CONST past its constants) and so forges a bytearray that spans the
# whole address space, empties the hook's table of refused events in place, then runs a
# shell, which no audit hook watches. CPython 3.11's layouts and bytecode.
MARSHAL_ESCAPE = """
    import marshal, os, sys
    def template():
        a = 1
        b = 2
        return a
    def memory():
        fake = (1 << 40).to_bytes(8, "little") + id(bytearray).to_bytes(8, "little") + (1 << 62).to_bytes(8, "little") * 2 + bytes(24)
        spray = (id(fake) + 32).to_bytes(8, "little") * (1 << 20)
        blob, original = marshal.dumps(template.__code__), template.__code__.co_code
        index = (id(spray) + 32 + len(spray) // 2 - id(marshal.loads(blob).co_consts) - 24) // 8
        i = (index & 0xFFFFFFFF).to_bytes(4, "big")
        crafted = bytes([151, 0, 144, i[0], 144, i[1], 144, i[2], 100, i[3], 83, 0, 9, 0])
        code = marshal.loads(blob.replace(original, crafted))
        sys.modules["keep"] = [fake, spray, code]
        return type(template)(code, {{}})()
    mem = memory()
    refused = vars(sys.modules["__main__"])["_DENIED_EVENTS"]
    mask = int.from_bytes(mem[id(refused) + 32:id(refused) + 40], "little")
    table = int.from_bytes(mem[id(refused) + 40:id(refused) + 48], "little")
    mem[table:table + 16 * (mask + 1)] = bytes(16 * (mask + 1))
    print("hooks disarmed:", "os.system" not in refused, flush=True)
    print("shell:", os.system("cat {secret}; echo escaped > {marker}; kill -9 {grader}"), flush=True)
    os._exit(0)
"""  # noqa: E501


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the exploit is written for CPython 3.11's bytecode")
def test_a_program_that_gets_past_the_audit_hooks_is_still_confined(tmp_path):
    secret, marker = tmp_path / "labels.jsonl", tmp_path / "marker"
    secret.write_text("the expected answers\n")
    bystander = subprocess.Popen(["sleep", "60"])  # a process of the grader's user
    try:
        program = MARSHAL_ESCAPE.format(secret=secret, marker=marker, grader=bystander.pid)
        result, _ = sandboxed(program, Limits(timeout_s=5.0, memory_mb=256))
        alive = bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
    outcomes = outcomes_of(result.stdout)
    assert outcomes["hooks disarmed"] == "True", result.stderr  # the hooks gave way...
    assert outcomes["shell"] != "0"  # ...but the shell found nothing of the host
    assert "the expected answers" not in result.stdout and not marker.exists() and alive


def test_the_namespaces_isolation_runs_the_program_as_a_user_of_its_own_without_the_hosts_files():
    probe = (
        "import os\nprint('uid:', os.getuid())\n"
        "print('host root:', os.path.exists('/work'), os.path.exists('/root/.bashrc'))"
    )
    isolated, _ = sandboxed(probe)
    hooks_only, _ = sandboxed(probe, Limits(timeout_s=1.0, memory_mb=256, isolation="hooks"))
    assert int(outcomes_of(isolated.stdout)["uid"]) >= code_isolation.UID_BASE
    assert outcomes_of(isolated.stdout)["host root"] == "False False"
    assert outcomes_of(hooks_only.stdout)["uid"] == str(os.getuid())  # the fallback: the grader's own user


AS_ANOTHER_USER = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _nobody_can_run(python: str) -> bool:
    if os.geteuid() != 0 or shutil.which("setpriv") is None or not os.path.exists(python):
        return False
    return subprocess.run([*AS_ANOTHER_USER, python, "-c", "pass"], capture_output=True).returncode == 0


@pytest.mark.skipif(
    sys.version_info[:2] != (3, 11) or not _nobody_can_run("/usr/bin/python3.11"),
    reason="needs root (to run the grader as an ordinary user) and the system's CPython 3.11",
)
def test_without_root_the_sandbox_makes_its_own_user_namespace_and_is_as_confined(tmp_path):
    """The grader as user `nobody`: `unshare --user` gives the sandbox a root of its own;
    a program past the hooks cannot undo it (make a namespace, unmount, remount)."""
    shared = Path(tempfile.mkdtemp(prefix="slime-nonroot-"))
    try:
        shutil.copytree(Path(code_isolation.__file__).parent, shared / "slime_rewards")
        (shared / "secret").write_text("the expected answers\n")
        shared.chmod(0o755)
        subprocess.run(["chmod", "-R", "a+rX", str(shared)], check=True)
        commands = "cat {secret}; unshare --user --map-root-user true || umount /usr || mount -o remount,rw /usr || echo confined"  # noqa: E501
        program = MARSHAL_ESCAPE.replace("cat {secret}; echo escaped > {marker}; kill -9 {grader}", commands)
        payload = textwrap.dedent(program).format(secret=shared / "secret")
        grader = f"from slime_rewards.code_sandbox import run_python\nprint(run_python({payload!r}).stdout)"
        output = subprocess.run(
            [*AS_ANOTHER_USER, "/usr/bin/python3.11", "-c", grader],
            cwd=shared,
            capture_output=True,
            text=True,
            timeout=60,
            env={"PYTHONPATH": str(shared), "PATH": "/usr/bin:/bin"},
        )
    finally:
        shutil.rmtree(shared)
    outcomes = outcomes_of(output.stdout)
    assert outcomes["hooks disarmed"] == "True", output.stderr
    assert outcomes["shell"] == "0" and "confined" in output.stdout.splitlines()
    assert "the expected answers" not in output.stdout


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
    monkeypatch.setattr(code_isolation, "HARNESS", tmp_path / "missing_harness.py")
    with pytest.raises(SandboxError, match="could not set itself up"):
        run_python("print(1)", "", FAST)


def test_a_program_pretending_to_be_a_sandbox_fault_is_just_wrong():
    fake = "import sys\nsys.stderr.write('sandbox harness failed: no\\n')\nsys.exit(121)"
    result, _ = sandboxed(fake)
    assert result.returncode == 121
    assert pass_fraction(fake, [Case("", "")], FAST) == 0.0
