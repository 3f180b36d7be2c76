"""Run a response's Python code against test cases in a sandboxed subprocess.

Each test runs in its own process (``python -I -S -B code_harness.py``) with:

- a fresh scratch directory (mode 0700) as the working directory, deleted afterwards;
- a clean environment (PATH, HOME/TMPDIR = the scratch directory, a UTF-8 locale) and
  isolated mode (no PYTHON* variables, no user or site packages: the standard library
  only);
- its own session (``start_new_session``): on timeout the whole process group is killed;
- resource limits set by the harness: address space (`code_memory_mb`), CPU seconds,
  file size, no core dumps;
- audit hooks (see `code_harness`) confining writes to the scratch directory and reads to
  it and the standard library, and refusing process creation, signals, native code, sockets
  and raising limits;
- stdin from a file and stdout/stderr to files outside the scratch directory (sizes capped
  by the file-size limit), so a chatty program cannot exhaust the grader's memory.

There is no process-count limit: the kernel counts every thread of our user against it (so
a training job's own threads would leave a solution none), and does not enforce it for
root. Process creation is refused by the audit hook instead, and whatever still runs when
the test ends is killed with the sandbox's process group.

What this does NOT guarantee: it is not a security boundary against a determined attacker.
Without namespaces or a separate user the code runs with our uid, and audit hooks can be
bypassed from pure Python by someone who sets out to: bytecode smuggled in through
`marshal` can corrupt memory, `_imp.create_builtin` restores the process-descriptor calls
that signal processes without an audit event, and `os.stat` and friends still show
metadata anywhere. Assert tests share the solution's namespace, so a solution can also
read or fake what the assertions compare (an object equal to everything). For untrusted
models at scale, run the reward in a container (or nsjail/bubblewrap, as another user)
and keep this layer as defence in depth.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HARNESS = Path(__file__).with_name("code_harness.py")
OUTPUT_LIMIT_BYTES = 4 * 1024 * 1024
MIN_MEMORY_MB = 32
_INTEGER = re.compile(r"[+-]?\d+")
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Limits:
    """Per-test limits (the `code_timeout` and `code_memory_mb` options)."""

    timeout_s: float = 5.0
    memory_mb: int = 512
    file_mb: int = 16

    def __post_init__(self):
        # Below this the interpreter cannot even compile the solution, and every answer would score 0.
        if self.memory_mb < MIN_MEMORY_MB or self.timeout_s <= 0:
            raise ValueError(
                f"code sandbox limits timeout_s={self.timeout_s}, memory_mb={self.memory_mb} are too small; "
                f"set --code-timeout above 0 and --code-memory-mb to at least {MIN_MEMORY_MB}"
            )


@dataclass(frozen=True)
class TestCase:
    """Either stdin → expected stdout, or assertion code run after the solution."""

    stdin: str = ""
    expected: str | None = None  # expected stdout (stdin tests)
    assertion: str | None = None  # test code (assert tests)


@dataclass(frozen=True)
class RunResult:
    """What one sandboxed run did."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool


class SandboxError(RuntimeError):
    """The sandbox itself failed (could not start or set up), as opposed to a wrong program."""


def pass_fraction(code: str, tests: list[TestCase], limits: Limits = Limits()) -> float:
    """The share of `tests` the code passes, each test in a fresh sandbox."""
    if not tests:
        raise ValueError("code reward needs at least one test case; add them to sample.label or metadata['tests']")
    return sum(passes(code, test, limits) for test in tests) / len(tests)


def passes(code: str, test: TestCase, limits: Limits = Limits()) -> bool:
    """Whether the code passes one test: it exits 0 in time, and its output matches, or
    (assert tests) the harness printed the token, which it does only after the last assertion."""
    token = secrets.token_hex(16) if test.assertion is not None else ""
    result = run_python(code, test.stdin, limits, test=test.assertion, token=token)
    if result.timed_out or result.returncode != 0:
        return False
    if test.assertion is not None:
        return token in result.stdout.splitlines()
    return outputs_match(result.stdout, test.expected or "")


def run_python(code: str, stdin: str = "", limits: Limits = Limits(), test: str | None = None, token: str = "") -> RunResult:
    """Run `code` (then `test`) in a fresh sandbox; see the module docstring."""
    base = Path(tempfile.mkdtemp(prefix="slime-code-"))
    try:
        work = base / "work"
        work.mkdir(mode=0o700)
        config = base / "config.json"
        config.write_text(json.dumps(_harness_config(code, test, token, limits)), encoding="utf-8")
        (base / "stdin").write_text(stdin, encoding="utf-8")
        return _execute(base, work, config, limits)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _harness_config(code: str, test: str | None, token: str, limits: Limits) -> dict:
    return {
        "solution": code,
        "test": test,
        "token": token,
        "memory_bytes": limits.memory_mb * 1024 * 1024,
        "cpu_seconds": math.ceil(limits.timeout_s) + 1,
        "file_bytes": limits.file_mb * 1024 * 1024,
    }


def _execute(base: Path, work: Path, config: Path, limits: Limits) -> RunResult:
    """Start the harness, wait at most the time limit, kill its process group if needed."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    command = [sys.executable, "-I", "-S", "-B", "-X", "utf8", str(HARNESS), str(config)]
    with open(base / "stdin", "rb") as stdin, open(base / "stdout", "wb") as stdout, open(base / "stderr", "wb") as stderr:
        try:
            process = subprocess.Popen(command, cwd=work, env=env, stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=True)
        except OSError as error:
            raise SandboxError(f"could not start the code sandbox ({sys.executable}): {error}") from error
        timed_out = False
        try:
            process.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        _kill_group(process)
    result = RunResult(process.returncode, _read(base / "stdout"), _read(base / "stderr"), timed_out)
    if config.exists():  # the harness deletes it just before running the solution
        what = f"could not set itself up (exit {result.returncode})"
        if timed_out:
            what = f"did not start within {limits.timeout_s}s"
        raise SandboxError(f"the code sandbox {what}: {result.stderr.strip()[-300:]}")
    return result


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


def outputs_match(actual: str, expected: str) -> bool:
    """Equal up to trailing whitespace per line and trailing blank lines; failing that,
    equal token by token: an integer exactly, another number within 1e-6 (absolute or
    relative)."""
    if _lines(actual) == _lines(expected):
        return True
    got, want = actual.split(), expected.split()
    return len(got) == len(want) and all(_tokens_match(g, w) for g, w in zip(got, want))


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _tokens_match(got: str, want: str) -> bool:
    if got == want:
        return True
    if _INTEGER.fullmatch(want):  # 10**9 + 6 is not "close enough" to 10**9 + 7
        return _INTEGER.fullmatch(got) is not None and int(got) == int(want)
    try:
        a, b = float(got), float(want)
    except ValueError:
        return False
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)


def extract_code(response: str) -> str | None:
    """From the answer (the text after the last ``</think>``, if any: drafts in the
    reasoning do not count), the last ```python (or ```py) fenced block; else the last
    fenced block of any language; else, with no fences at all, the whole answer."""
    answer = (response or "").rsplit("</think>", 1)[-1]
    blocks = _FENCE.findall(answer)
    python = [body for lang, body in blocks if lang.lower() in ("python", "python3", "py")]
    if python or blocks:
        return (python or [body for _, body in blocks])[-1]
    return answer.strip() or None


def parse_tests(tests) -> list[TestCase]:
    """Test cases from a sample: a list of ``{"input", "output"}`` dicts; a dict
    ``{"inputs": [...], "outputs": [...]}``; assert code as a string (each top-level
    ``assert`` is one test, other statements are shared set-up) or a list of strings; or
    any of these as a JSON string."""
    if isinstance(tests, str):
        decoded = _json_or_none(tests)
        return parse_tests(decoded) if decoded is not None else _assert_tests(tests)
    if isinstance(tests, dict) and tests.get("fn_name"):
        raise ValueError(
            f"call-based tests (fn_name={tests['fn_name']!r}) are not supported; convert them to "
            "assert statements, e.g. 'assert f(*inputs) == output'"
        )
    if isinstance(tests, dict) and "inputs" in tests and "outputs" in tests:
        return [TestCase(_text(i), _text(o)) for i, o in zip(tests["inputs"], tests["outputs"], strict=True)]
    if isinstance(tests, (list, tuple)) and all(isinstance(t, dict) for t in tests):
        return [TestCase(_text(t.get("input", "")), _text(t.get("output", ""))) for t in tests]
    if isinstance(tests, (list, tuple)) and all(isinstance(t, str) for t in tests):
        return [TestCase(assertion=t) for t in tests]
    raise ValueError(
        f"unrecognised code tests of type {type(tests).__name__}; expected a list of "
        '{"input", "output"} dicts, {"inputs": [...], "outputs": [...]}, or assert statements'
    )


def _assert_tests(source: str) -> list[TestCase]:
    """One test per top-level assert; the other statements run before each of them."""
    if not source.strip():
        raise ValueError("the code tests are empty; put assert statements or input/output pairs in the sample")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [TestCase(assertion=source)]
    setup = [ast.unparse(node) for node in tree.body if not isinstance(node, ast.Assert)]
    asserts = [ast.unparse(node) for node in tree.body if isinstance(node, ast.Assert)]
    if not asserts:
        return [TestCase(assertion=source)]
    prefix = "\n".join(setup)
    return [TestCase(assertion=f"{prefix}\n{a}" if prefix else a) for a in asserts]


def _json_or_none(text: str):
    stripped = text.strip()
    if not stripped.startswith(("[", "{")):
        return None
    try:
        return json.loads(stripped)
    except ValueError:
        return None


def _text(value) -> str:
    if isinstance(value, (list, tuple)):
        return "\n".join(str(v) for v in value)
    return str(value)
