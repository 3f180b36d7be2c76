"""Assert tests whose verdict the tested program cannot fake.

An assert that runs in the program's process can be gamed: an object whose ``__eq__``
always returns True passes ``assert f(x) == 3``, and a program that reads the test's
code finds the expected value. So before a test is sent to the sandbox, every ``assert``
in it (at any depth) is rewritten into a *report*:

    assert f(1, 2) == 3     →    __slime_check__(0, (__slime_plain__(f(1, 2)),))

- the comparison (``==``, ``<``, ``in``, ... and chains of them; a bare expression is a
  truth test) is made here, in the grader, on values decoded from plain data;
- operands that are literals (``3``, ``[1, 2]``, ``"abc"``) stay here: the program never
  sees the expected value of a ``f(x) == literal`` assert;
- each call's result inside an assert (``f(1, 2)`` above, or in ``abs(f(x) - 1.5)``) must
  hold no instance of a class defined in Python (``__slime_plain__`` checks this in the
  sandbox), so no operator the program defines runs in the test's expressions;
- the harness reports each value with its secret token, encoded from its exact builtin
  type (`code_harness.encode`), and `decode` accepts only that form.

The test code's other statements (imports, helpers, a reference solution) run in the
sandbox unchanged; what they compute is visible to the program. A value that is not plain
data (an instance of ``Counter``, ``Fraction`` or the program's own class), as an operand or
as a call's result anywhere in an assert, fails the check, even for a right answer.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass

CHECK = "__slime_check__"
REPORT = "slime-check"  # the start of a report line on stdout
PLAIN = "__slime_plain__"
_OPERATORS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_NOT_LITERAL = object()


@dataclass(frozen=True)
class Check:
    """One rewritten assert: its operands, each ``("literal", value)`` (kept here) or
    ``("reported", i)`` (the program's i-th reported value), and the comparison operators
    between them (none: the single operand must be true)."""

    operands: tuple
    operators: tuple
    top_level: bool  # a top-level assert runs exactly once; one inside a loop or function, any number of times

    def holds(self, reported: tuple) -> bool:
        values = [value if kind == "literal" else reported[value] for kind, value in self.operands]
        if not self.operators:
            return bool(values[0])
        try:
            return all(compare(a, b) for compare, a, b in zip(self.operators, values, values[1:]))
        except TypeError:  # e.g. None < 1: the assert would have raised
            return False


@dataclass(frozen=True)
class AssertProgram:
    """Test code with its asserts replaced by reports, and the checks those reports answer."""

    source: str
    checks: tuple[Check, ...]

    def passed(self, reports: list[tuple[int, tuple | None]]) -> bool:
        """Whether every report satisfies its check (None: a value that was not plain data)
        and every top-level check was reported."""
        seen = set()
        for index, values in reports:
            if not 0 <= index < len(self.checks) or values is None or not self.checks[index].holds(values):
                return False
            seen.add(index)
        return all(i in seen for i, check in enumerate(self.checks) if check.top_level)


def rewrite_asserts(source: str) -> AssertProgram:
    """The `AssertProgram` of a test's code (a SyntaxError if it does not parse)."""
    tree = ast.parse(source)
    rewriter = _Rewriter({id(node) for node in tree.body})
    tree = ast.fix_missing_locations(rewriter.visit(tree))
    return AssertProgram(ast.unparse(tree), tuple(rewriter.checks))


class _Rewriter(ast.NodeTransformer):
    def __init__(self, top_level: set[int]):
        self.top_level, self.checks = top_level, []

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        test = node.test
        parts, operators = [test], ()
        if isinstance(test, ast.Compare) and all(type(op) in _OPERATORS for op in test.ops):
            parts, operators = [test.left, *test.comparators], tuple(_OPERATORS[type(op)] for op in test.ops)
        operands, sent = [], []
        for part in parts:
            literal = _literal(part)
            if literal is _NOT_LITERAL:
                operands.append(("reported", len(sent)))
                sent.append(_PlainCalls().visit(part))
            else:
                operands.append(("literal", literal))
        self.checks.append(Check(tuple(operands), operators, id(node) in self.top_level))
        arguments = [ast.Constant(len(self.checks) - 1), ast.Tuple(sent, ast.Load())]
        report = ast.Call(ast.Name(CHECK, ast.Load()), arguments, [])
        return ast.copy_location(ast.Expr(report), node)


class _PlainCalls(ast.NodeTransformer):
    """Wraps every call whose result is used as a value in ``__slime_plain__(...)``; the
    receiver of a method call (``Solution()`` in ``Solution().solve(x)``) stays as it is."""

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        return ast.Call(ast.Name(PLAIN, ast.Load()), [node], [])

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        if isinstance(node.value, ast.Call):
            self.generic_visit(node.value)
            return node
        return self.generic_visit(node)


def _literal(node: ast.expr):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


# --- decoding the harness's reports -------------------------------------------------------

_CONTAINERS = {"L": list, "T": tuple, "S": set, "Z": frozenset}


def decode(encoded):
    """The value a report encodes (see `code_harness.encode`): a JSON tree of ``[tag, ...]``
    lists. Raises ValueError on anything else."""
    if not isinstance(encoded, list) or not encoded or not isinstance(encoded[0], str):
        raise ValueError("malformed report")
    tag, rest = encoded[0], encoded[1:]
    if tag == "N" and not rest:
        return None
    if tag == "B" and len(rest) == 1 and isinstance(rest[0], bool):
        return rest[0]
    if tag in ("I", "F", "C", "s", "b") and all(isinstance(part, str) for part in rest):
        return _scalar(tag, rest)
    if tag in _CONTAINERS and len(rest) == 1 and isinstance(rest[0], list):
        return _CONTAINERS[tag](decode(item) for item in rest[0])
    if tag == "D" and len(rest) == 1 and isinstance(rest[0], list):
        return {decode(key): decode(value) for key, value in rest[0]}
    raise ValueError(f"malformed report tag {tag!r}")


def _scalar(tag: str, parts: list):
    if tag == "I" and len(parts) == 1:
        return int(parts[0], 16)
    if tag == "F" and len(parts) == 1:
        return float.fromhex(parts[0])
    if tag == "C" and len(parts) == 2:
        return complex(float.fromhex(parts[0]), float.fromhex(parts[1]))
    if tag == "s" and len(parts) == 1:
        return parts[0]
    if tag == "b" and len(parts) == 1:
        return bytes.fromhex(parts[0])
    raise ValueError(f"malformed {tag!r} report")
