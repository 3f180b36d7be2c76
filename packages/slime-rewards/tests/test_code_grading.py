"""The `code` reward's grading against programs that fake a pass: printed fake results,
objects whose comparisons always agree, overridden operators and builtins, and the assert
forms a right answer must still pass. Each test runs the sandbox for real."""

import textwrap

import pytest

from slime_rewards.code_sandbox import Limits, pass_fraction, passes
from slime_rewards.code_sandbox import TestCase as Case  # renamed so that pytest does not collect it

FAST = Limits(timeout_s=1.0, memory_mb=256)


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


# Assert-style tests with the operators a program can define for its own objects: each
# cheat with the assert forms it passed before the grader made the comparisons.
EQUALS_3, LOOP = "assert add(1, 2) == 3", "for a, b in [(1, 2), (2, 5)]:\n    assert add(a, b) == a + b"
OVERRIDDEN = {
    "an object equal to everything": (
        [EQUALS_3, LOOP],
        """
        class Anything:
            def __eq__(self, other):
                return True
            __hash__ = object.__hash__
        def add(a, b):
            return Anything()
    """,
    ),
    "an int equal to everything": (
        [EQUALS_3],
        """
        class Number(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__
        def add(a, b):
            return Number(0)
    """,
    ),
    "a list equal to everything": (
        [EQUALS_3],
        """
        class Everything(list):
            def __eq__(self, other):
                return True
        def add(a, b):
            return Everything()
    """,
    ),
    "arithmetic that lands on zero": (
        ["assert abs(add(1, 2) - 3) < 1e-9"],
        """
        class Zero:
            def __sub__(self, other):
                return self
            def __abs__(self):
                return 0
        def add(a, b):
            return Zero()
    """,
    ),
    "builtins swapped for the test": (
        ["assert sorted([add(1, 2)]) == [3]"],
        """
        import builtins
        builtins.sorted = lambda value: [3]
        def add(a, b):
            return None
    """,
    ),
    "the expected value read from the test's code": (
        [EQUALS_3],
        """
        import sys
        def add(a, b):
            constants = sys._getframe(1).f_code.co_consts
            return next(c for c in constants if isinstance(c, int) and c not in (a, b))
    """,
    ),
}
ASSERT_FORMS = [
    EQUALS_3,
    "assert abs(add(1, 2) - 3) < 1e-9",
    "assert sorted([add(1, 2)]) == [3]",
    "assert [add(1, 2)] == [3]",
    LOOP,
]


@pytest.mark.parametrize("cheat", list(OVERRIDDEN))
def test_a_program_cannot_override_the_comparisons_of_assert_tests(cheat):
    forms, code = OVERRIDDEN[cheat]
    assert {
        form: pass_fraction(textwrap.dedent(code), [Case(assertion=form)], FAST) for form in forms
    } == dict.fromkeys(forms, 0.0)


def test_a_right_answer_passes_every_form_of_those_asserts():
    assert (
        pass_fraction("def add(a, b):\n    return a + b", [Case(assertion=form) for form in ASSERT_FORMS], FAST) == 1.0
    )
