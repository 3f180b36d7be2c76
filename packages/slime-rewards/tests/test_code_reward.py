"""The `code` reward: Python from the response, graded against the sample's tests (stdin,
assertion and function-call formats), and how bad tests or limits are refused. The sandbox's
defences against hostile programs are in test_code_sandbox.py.
"""

import asyncio
import json
import textwrap
import time

import pytest

from slime_core import Sample
from slime_core.config import Config
from slime_core.plugins import Plugins
from slime_core.rollout.reward_hub import RewardHub
from slime_core.sample import SampleStatus
from slime_rewards.code_sandbox import Limits, extract_code, outputs_match, parse_tests, pass_fraction, passes
from slime_rewards.code_sandbox import TestCase as Case  # renamed so that pytest does not collect it

FAST = Limits(timeout_s=1.0, memory_mb=256)
CONFIG = Config({"code_timeout": 1.0, "code_memory_mb": 256})


@pytest.fixture(scope="module")
def code_reward():
    return Plugins().registry("reward_functions").get("code")


def fenced(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{textwrap.dedent(code).strip()}\n```\n"


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


def test_a_sample_whose_tests_run_past_its_deadline_scores_zero_and_is_kept():
    """Sixteen tests that each loop until the per-test limit would take 16 s; the reward hub
    gives the call 10 s. The sample's deadline (3 s) ends it first, at 0, with the reason."""
    config = Config(
        {
            "rm_type": "code",
            "rm_timeout": 10.0,
            "rm_max_concurrency": 1,
            "group_rm": False,
            "rm_failure_reward": None,
            "reward_key": None,
            "drop_nonfinite_rewards": False,
            "code_timeout": 1.0,
            "code_memory_mb": 256,
            "code_sample_timeout": 3.0,
        }
    )
    hub = RewardHub(config, Plugins())
    loop = fenced("while True:\n    pass")
    sample = Sample(
        response=loop, label=[{"input": str(n), "output": str(n)} for n in range(16)], status=SampleStatus.COMPLETED
    )
    try:
        start = time.monotonic()
        asyncio.run(hub.score_sample(sample))
        elapsed = time.monotonic() - start
    finally:
        hub.close()
    assert (sample.reward, sample.status, sample.error) == (0.0, SampleStatus.COMPLETED, None)
    assert sample.metadata["code_reward"].startswith(
        "scored 0: the sample's tests ran past --code-sample-timeout (3.0s)"
    )
    assert 3.0 <= elapsed < 8.0


ASSERT_FORMS = [  # each graded by the grader on reported plain data, as Python would grade it
    "assert stats([3, 1, 2]) == {'min': 1, 'sorted': (1, 2, 3), 'unique': {1, 2, 3}, 'big': 2 ** 100, 'raw': b'\\x00', "
    "'mean': 2.0}",
    "assert 0 < stats([5])['min'] <= 5 != 6",
    "assert 2 in stats([2])['unique'] and not stats([])",
    "assert stats([]) is None",
    "assert stats([1.5])['mean'] == 1.5 and stats([1.0, 2.0])['mean'] != 1.4",
    "import math\nassert math.isclose(stats([1, 2])['mean'], 1.5)",
    "class Solution:\n    def run(self, xs):\n        return stats(xs)['sorted']\nassert Solution().run([2, 1]) == (1, "
    "2)",
    "def check(xs):\n    assert stats(xs)['min'] == min(xs)\nfor xs in ([1], [3, 2]):\n    check(xs)",
]
STATS = """
    def stats(xs):
        if not xs:
            return None
        return {"min": min(xs), "sorted": tuple(sorted(xs)), "unique": set(xs), "big": 2 ** 100,
                "raw": b"\\x00", "mean": sum(xs) / len(xs)}
"""


def test_assert_tests_grade_as_python_would():
    right = textwrap.dedent(STATS)
    wrong = right.replace("min(xs)", "max(xs)")
    assert [passes(right, Case(assertion=form), FAST) for form in ASSERT_FORMS] == [True] * 8
    assert [passes(wrong, Case(assertion=form), FAST) for form in ASSERT_FORMS] == [
        False,
        True,
        True,
        True,
        True,
        True,
        True,
        False,
    ]


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


def test_a_sample_deadline_the_reward_hub_would_cut_short_is_a_config_error():
    from slime_rewards.plugin import slime_validate_config

    options = {"rm_type": "boxed_code", "rm_timeout": 30.0, "code_sample_timeout": 30.0, "code_isolation": "hooks"}
    assert [e.split(" must")[0] for e in slime_validate_config(Config(options))] == ["--code-sample-timeout (30.0s)"]
    assert slime_validate_config(Config({**options, "code_sample_timeout": 20.0})) == []
