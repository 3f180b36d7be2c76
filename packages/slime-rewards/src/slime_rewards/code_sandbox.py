"""Run a response's Python code against test cases in a sandbox, and grade it.

Each test runs in its own sandbox (`code_isolation`): by default a process in namespaces of
its own, as a user of its own, in a root that holds only the interpreter and a fresh scratch
directory, with no network; inside it, the harness (`code_harness`) adds resource limits
(memory, CPU seconds, file size, processes) and audit hooks. The scratch directory is
deleted afterwards.

Grading: a stdin test passes when the program exits 0 in time and its stdout matches the
expected output, compared here. An assert test passes when the harness reports that the
test code ran to its end (a token only the harness holds) and every assert's values,
reported as plain data, satisfy the comparison made here (`code_checks`): an object that
claims to equal everything, or a program that reads the expected value, gains nothing.

All tests of a sample share one deadline (`sample_timeout_s`, ``--code-sample-timeout``): a
sample that runs past it scores 0 (it is not dropped), and its grade says why.
"""

from __future__ import annotations

import ast
import json
import math
import re
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from slime_rewards import code_isolation
from slime_rewards.code_checks import REPORT, AssertProgram, decode, rewrite_asserts
from slime_rewards.code_isolation import ISOLATIONS, RunResult, SandboxError

MIN_MEMORY_MB = 32
_INTEGER = re.compile(r"[+-]?\d+")
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)

__all__ = ["Grade", "Limits", "RunResult", "SandboxError", "TestCase", "grade", "pass_fraction", "passes", "run_python"]


@dataclass(frozen=True)
class Limits:
    """The sandbox's limits (the `code_*` options)."""

    timeout_s: float = 5.0  # per test
    memory_mb: int = 512
    file_mb: int = 16
    sample_timeout_s: float = 20.0  # all tests of a sample together
    isolation: str = "namespaces"  # one of code_isolation.ISOLATIONS

    def __post_init__(self):
        # Below this the interpreter cannot even compile the solution, and every answer would score 0.
        if self.memory_mb < MIN_MEMORY_MB or self.timeout_s <= 0 or self.sample_timeout_s <= 0:
            raise ValueError(
                f"code sandbox limits timeout_s={self.timeout_s}, sample_timeout_s={self.sample_timeout_s}, "
                f"memory_mb={self.memory_mb} are too small; set --code-timeout and --code-sample-timeout above 0 "
                f"and --code-memory-mb to at least {MIN_MEMORY_MB}"
            )
        if self.isolation not in ISOLATIONS:
            raise ValueError(f"unknown --code-isolation {self.isolation!r}; choose one of {', '.join(ISOLATIONS)}")


@dataclass(frozen=True)
class TestCase:
    """Either stdin → expected stdout, or assertion code run after the solution."""

    stdin: str = ""
    expected: str | None = None  # expected stdout (stdin tests)
    assertion: str | None = None  # test code (assert tests)


@dataclass(frozen=True)
class Grade:
    """A sample's score and why: ``"3/4 tests passed"``, or the deadline that stopped it."""

    score: float
    reason: str


def grade(code: str, tests: list[TestCase], limits: Limits = Limits()) -> Grade:
    """The share of `tests` the code passes, each test in a fresh sandbox; 0 when the tests
    together run past ``limits.sample_timeout_s``."""
    if not tests:
        raise ValueError("code reward needs at least one test case; add them to sample.label or metadata['tests']")
    deadline = time.monotonic() + limits.sample_timeout_s
    passed = 0
    for number, test in enumerate(tests, 1):
        left = deadline - time.monotonic()
        passed_this = left > 0 and passes(code, test, limits, deadline)
        if time.monotonic() >= deadline:
            return Grade(
                0.0,
                f"scored 0: the sample's tests ran past --code-sample-timeout "
                f"({limits.sample_timeout_s}s) at test {number} of {len(tests)}",
            )
        passed += passed_this
    return Grade(passed / len(tests), f"{passed}/{len(tests)} tests passed")


def pass_fraction(code: str, tests: list[TestCase], limits: Limits = Limits()) -> float:
    """`grade`'s score."""
    return grade(code, tests, limits).score


def passes(code: str, test: TestCase, limits: Limits = Limits(), deadline: float | None = None) -> bool:
    """Whether the code passes one test within the per-test limit (and `deadline`, a
    `time.monotonic()` value)."""
    if test.assertion is None:
        result = run_python(code, test.stdin, limits, deadline=deadline)
        return not result.timed_out and result.returncode == 0 and outputs_match(result.stdout, test.expected or "")
    try:
        program = rewrite_asserts(test.assertion)
    except SyntaxError:
        return False  # as the harness would find: the test code does not compile
    token = secrets.token_hex(16)
    result = run_python(code, test.stdin, limits, test=program.source, token=token, deadline=deadline)
    if result.timed_out or result.returncode != 0 or token not in result.stdout.splitlines():
        return False
    return _reports_pass(program, result.stdout)


def _reports_pass(program: AssertProgram, stdout: str) -> bool:
    reports = []
    for line in stdout.splitlines():
        if line.startswith(REPORT + " "):
            try:
                index, values = json.loads(line[len(REPORT) + 1 :])
                reports.append((index, None if values is None else tuple(decode(v) for v in values)))
            except (ValueError, TypeError, OverflowError, RecursionError):
                return False  # a line the program printed to look like a report
    return program.passed(reports)


def run_python(
    code: str,
    stdin: str = "",
    limits: Limits = Limits(),
    test: str | None = None,
    token: str = "",
    deadline: float | None = None,
) -> RunResult:
    """Run `code` (then `test`) in a fresh sandbox for at most the per-test limit, and not
    past `deadline`; see `code_isolation`."""
    base = Path(tempfile.mkdtemp(prefix="slime-code-"))
    try:
        work = base / "work"
        work.mkdir(mode=0o700)
        (base / "stdin").write_text(stdin, encoding="utf-8")
        config = _harness_config(code, test, token, limits)
        return code_isolation.launch(base, work, config, limits.isolation, limits.timeout_s, deadline)
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
