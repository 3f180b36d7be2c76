"""Decide whether two normalised answers mean the same thing.

Layers, cheapest first: the exact string; the answer's shape (`structure`: order of a
tuple, brackets of an interval, all parts of a multi-part answer); the unit, percent and
degree policy (`units`); then the values themselves, parsed into sympy (`latex`):

- two numbers are equal when exactly equal as rationals (``0.5`` = ``\\frac{1}{2}``), else
  when their 30-digit values agree to a relative 1e-9;
- a decimal reference answer (``0.33``, ``3.14``) is also matched by an exact prediction
  that rounds to it (``\\frac{1}{3}``, ``\\pi``) when that exact value has no finite decimal
  expansion: the reference was evidently rounded. A prediction that is itself a different
  decimal (``0.333`` for ``0.33``, ``0.5`` for ``5``) does not match;
- expressions with variables must use the same variables and agree at several random
  points (a probabilistic identity test, robust where ``simplify`` is slow or incomplete),
  falling back to ``simplify`` when the points cannot be evaluated;
- equations match when their sides match, or when ``lhs - rhs`` of one is a constant
  multiple of the other's (``2x + 3y = 6`` is ``y = 2 - 2x/3``);
- an equation against a value compares its value side: the last, unless that is a lone
  variable (``x = 3`` and ``3 = x`` are ``3``);
- a number spelled as a word up to twenty (``\\text{five}``) is that number;
- assignments answer a tuple in the order of their variables (``y = 4, x = 3`` is ``(3, 4)``);
- a time of day with AM/PM matches the same time on a 24-hour clock (``14:30`` is
  ``2:30 PM``, ``2:30 AM`` is not).

`equivalent` has no time limit of its own: callers run it under `time_limit` (the grader
does), because sympy can be slow on adversarial input.
"""

from __future__ import annotations

import random
import re

import sympy

from slime_rewards.math.latex import GREEK_LETTERS, KNOWN_WORDS, LatexError, parse_latex
from slime_rewards.math.normalize import compact
from slime_rewards.math.structure import Equation, Matrix, Scalar, Sequence, Union, parse_structure
from slime_rewards.math.units import split_quantity

RELATIVE_TOLERANCE = 1e-9
_TEST_POINTS = 5
_DECIMAL = re.compile(r"-?\d*\.(\d+)")
_VARIABLE = re.compile(r"[a-zA-Z](?:_\{?\w+\}?)?")
_CLOCK = re.compile(r"(\d{1,2}):([0-5]\d)\s*(?:([apAP])\.?\s*[mM]\.?)?")
_NUMBER_WORDS = {
    word: str(n)
    for n, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
}


def equivalent(pred: str, gold: str) -> bool:
    """Whether normalised answer `pred` means the same as reference `gold`.

    Any exception from sympy on strange input means "not shown equal" (False): a grader
    must not crash on a malformed response.
    """
    try:
        return nodes_equal(parse_structure(pred), parse_structure(gold))
    except (
        LatexError,
        RecursionError,
        ValueError,
        TypeError,
        ArithmeticError,
        AttributeError,
        NotImplementedError,
        IndexError,
        KeyError,
        sympy.SympifyError,
    ):
        return False


def nodes_equal(pred, gold) -> bool:
    """Compare two shapes from `parse_structure`, the gold's shape deciding what order means."""
    if isinstance(pred, Equation) and isinstance(gold, Equation):
        return equations_equal(pred, gold)
    if isinstance(pred, Equation):
        return nodes_equal(value_side(pred), gold)
    if isinstance(gold, Equation):
        return nodes_equal(pred, value_side(gold))
    pred, gold = _as_sequence(pred), _as_sequence(gold)
    if isinstance(pred, Sequence) and isinstance(gold, Sequence):
        return sequences_equal(pred, gold)
    if isinstance(pred, Sequence) and len(pred.items) == 1 and pred.kind != "interval":
        return nodes_equal(pred.items[0], gold)
    if isinstance(gold, Sequence) and len(gold.items) == 1 and gold.kind != "interval":
        return nodes_equal(pred, gold.items[0])
    if isinstance(pred, Matrix) and isinstance(gold, Matrix):
        return matrices_equal(pred, gold)
    if isinstance(pred, Scalar) and isinstance(gold, Scalar):
        return scalars_equal(pred.text, gold.text)
    return False


def sequences_equal(pred: Sequence, gold: Sequence) -> bool:
    """Same length; intervals need the same brackets; a gold tuple keeps order, sets and
    bare lists (solutions) do not."""
    if len(pred.items) != len(gold.items):
        return False
    if "interval" in (pred.kind, gold.kind):
        same_brackets = (pred.opener, pred.closer) == (gold.opener, gold.closer)
        if not (same_brackets and {pred.kind, gold.kind} <= {"interval", "tuple"}):
            return False
        return _ordered_equal(pred.items, gold.items)
    if gold.kind == "tuple":
        items = by_variable(pred.items) if pred.kind == "list" else pred.items
        return _ordered_equal(items, gold.items)
    return _unordered_equal(pred.items, gold.items)


def by_variable(items: tuple) -> tuple:
    """``y = 4, x = 3`` reordered as ``x = 3, y = 4``, when every item assigns a different
    variable; other items unchanged."""
    names = [_assigned_variable(item) for item in items]
    if None in names or len(set(names)) != len(names):
        return items
    return tuple(item for _, item in sorted(zip(names, items), key=lambda pair: pair[0]))


def _assigned_variable(item) -> str | None:
    if not (isinstance(item, Equation) and len(item.sides) == 2 and isinstance(item.sides[0], Scalar)):
        return None
    name = item.sides[0].text.strip().lstrip("\\")
    return name if _VARIABLE.fullmatch(name) or name in GREEK_LETTERS else None


def matrices_equal(pred: Matrix, gold: Matrix) -> bool:
    """Same shape, equal cells."""
    if [len(r) for r in pred.rows] != [len(r) for r in gold.rows]:
        return False
    return all(_ordered_equal(p, g) for p, g in zip(pred.rows, gold.rows))


def equations_equal(pred: Equation, gold: Equation) -> bool:
    """Side by side (either orientation), else proportional ``lhs - rhs`` for two-sided ones."""
    if len(pred.sides) == len(gold.sides):
        if _ordered_equal(pred.sides, gold.sides) or _ordered_equal(pred.sides[::-1], gold.sides):
            return True
    if len(pred.sides) == 2 == len(gold.sides) and all(isinstance(s, Scalar) for s in pred.sides + gold.sides):
        left = parse_value(pred.sides[0].text) - parse_value(pred.sides[1].text)
        right = parse_value(gold.sides[0].text) - parse_value(gold.sides[1].text)
        return proportional(left, right)
    return False


def value_side(equation: Equation):
    """The side of ``x = 3`` that holds the value: the last, or the first in ``3 = x``."""
    last = equation.sides[-1]
    if isinstance(last, Scalar) and _VARIABLE.fullmatch(last.text.strip()):
        return equation.sides[0]
    return last


def scalars_equal(pred: str, gold: str) -> bool:
    """Two single values, with the unit / percent / degree policy of `units`."""
    if compact(pred) == compact(gold):
        return True
    clock = clock_times_equal(pred, gold)
    if clock is not None:
        return clock
    p, g = split_quantity(_digits(pred)), split_quantity(_digits(gold))
    scale = sympy.Integer(1)
    if p.unit and g.unit:
        if p.unit.dims != g.unit.dims:
            return False
        scale = sympy.Rational(p.unit.factor / g.unit.factor).limit_denominator(10**12)
    if is_text(p.value) or is_text(g.value):
        return text_equal(p.value, g.value)
    pv, gv = parse_pair(p.value, g.value)
    pv = pv * scale
    for a, b in _readings(pv, gv, p, g):
        if values_equal(a, b, pred_text=p.value, gold_text=g.value):
            return True
    return False


def _readings(pv, gv, p, g):
    """The value pairs to try: as written, then the percent and degree readings."""
    yield pv, gv
    if p.percent != g.percent:
        yield (pv / 100, gv) if p.percent else (pv, gv / 100)
    if p.degrees != g.degrees:
        yield (pv * sympy.pi / 180, gv) if p.degrees else (pv, gv * sympy.pi / 180)


def values_equal(pred, gold, pred_text: str = "", gold_text: str = "") -> bool:
    """Equal sympy values: exact, numeric (see module docstring), or as identities."""
    if pred == gold:
        return True
    free = pred.free_symbols | gold.free_symbols
    if not free:
        return numbers_equal(pred, gold, pred_text, gold_text)
    return identity(pred - gold)


def numbers_equal(pred, gold, pred_text: str = "", gold_text: str = "") -> bool:
    """Two constant values; the rounding rule applies to decimal references only."""
    if pred.is_Rational and gold.is_Rational:
        return pred == gold or _rounds_to(pred, gold, pred_text, gold_text)
    if not (pred.is_finite and gold.is_finite):
        return False
    a, b = sympy.N(pred, 30), sympy.N(gold, 30)  # arbitrary-exponent floats: no overflow
    scale = sympy.Max(1, abs(a), abs(b))
    if bool(abs(a - b) <= RELATIVE_TOLERANCE * scale):
        return True
    return _rounds_to(pred, gold, pred_text, gold_text)


def _rounds_to(pred, gold, pred_text: str, gold_text: str) -> bool:
    """A decimal gold with d places matches an exact pred without a finite decimal expansion
    that rounds to it (strictly within half a unit in the last place)."""
    match = _DECIMAL.fullmatch(compact(gold_text))
    if match is None or _DECIMAL.fullmatch(compact(pred_text)) or _has_finite_decimal(pred):
        return False
    value = complex(sympy.N(pred, 30))
    if abs(value.imag) > 1e-12:
        return False
    return abs(value.real - float(gold)) < 0.5 * 10 ** -len(match.group(1)) - 1e-15


def _has_finite_decimal(value) -> bool:
    """Rationals whose denominator has only the prime factors 2 and 5."""
    if not value.is_Rational:
        return False
    return set(sympy.factorint(value.q)) <= {2, 5}


def identity(difference) -> bool:
    """Whether an expression in variables is identically zero: random points, then simplify."""
    values = values_at_points(difference)
    if len(values) >= 2:
        return all(abs(v) <= 1e-8 for v in values)
    return sympy.simplify(difference) == 0


def proportional(left, right) -> bool:
    """Whether `left` is a nonzero constant times `right` (same variables), at random points."""
    if left.free_symbols != right.free_symbols or not left.free_symbols:
        return False
    ratios = values_at_points(left / right)
    if len(ratios) < 2 or abs(ratios[0]) < 1e-12:
        return False
    return all(abs(r - ratios[0]) <= 1e-8 * max(1.0, abs(ratios[0])) for r in ratios)


def values_at_points(expr) -> list[complex]:
    """`expr` at a few fixed pseudo-random points in (0.3, 2.7); points where it is undefined
    are skipped."""
    symbols = sorted(expr.free_symbols, key=str)
    rng = random.Random(0)
    values = []
    for _ in range(_TEST_POINTS):
        point = {s: sympy.Float(rng.uniform(0.3, 2.7), 30) for s in symbols}
        try:
            value = complex(expr.evalf(30, subs=point))
        except (TypeError, ValueError, ZeroDivisionError):
            continue
        if value == value and abs(value) != float("inf"):
            values.append(value)
    return values


def is_text(value: str) -> bool:
    """A word answer ("Monday", "no solution") rather than an expression."""
    bare = re.sub(r"\\[a-zA-Z]+", " ", value)
    words = re.findall(r"[a-zA-Z]+", bare)
    if any(len(w) >= 3 and w.lower() not in KNOWN_WORDS for w in words):
        return True
    return bare.strip().lower() in {"no", "yes"}


def text_equal(pred: str, gold: str) -> bool:
    """Word answers: case, punctuation, spacing and articles ignored."""

    def key(s: str) -> str:
        s = re.sub(r"\b(?:a|an|the)\b", " ", s.lower())
        s = re.sub(r"\bdne\b", "does not exist", s)
        return re.sub(r"[^a-z0-9]", "", s)

    return key(pred) == key(gold) and key(gold) != ""


def clock_times_equal(pred: str, gold: str) -> bool | None:
    """Whether two times of day agree, or None unless both are ``h:mm`` and one has AM/PM."""
    p, g = _CLOCK.fullmatch(pred.strip()), _CLOCK.fullmatch(gold.strip())
    if not (p and g and (p.group(3) or g.group(3))):
        return None
    return bool(_minutes_after_midnight(p) & _minutes_after_midnight(g))


def _minutes_after_midnight(match: re.Match) -> set[int]:
    """The readings of ``h:mm [AM|PM]``: one with AM/PM or a 24-hour hour, else morning and afternoon."""
    hour, minute, half = int(match.group(1)), int(match.group(2)), (match.group(3) or "").lower()
    if half:
        return {(hour % 12 + (12 if half == "p" else 0)) * 60 + minute}
    if hour > 12:
        return {hour * 60 + minute}
    return {(hour % 12) * 60 + minute, (hour % 12 + 12) * 60 + minute}


def _digits(value: str) -> str:
    """A number word (``five``, ``Twelve``) as digits; anything else unchanged."""
    return _NUMBER_WORDS.get(value.strip().lower(), value)


def parse_pair(pred: str, gold: str):
    """Parse both values with our parser; if either fails, both with latex2sympy2_extended."""
    try:
        return parse_value(pred), parse_value(gold)
    except LatexError:
        return _latex2sympy(pred), _latex2sympy(gold)


def parse_value(text: str):
    """A scalar's sympy value (our parser); raises `LatexError`."""
    return parse_latex(text)


def _latex2sympy(text: str):
    """The fallback LaTeX parser (handles constructs ours does not); raises `LatexError`."""
    from latex2sympy2_extended import latex2sympy

    try:
        value = latex2sympy(text)
    except Exception as error:  # the antlr parser raises many unrelated types
        raise LatexError(str(error)) from error
    if not isinstance(value, sympy.Expr):
        raise LatexError("not a scalar expression")
    if value.has(sympy.Sum, sympy.Product, sympy.Integral, sympy.Derivative):
        value = value.doit()  # a closed form, where sympy finds one, is fast to compare
    return value


def _as_sequence(node):
    """A union is an unordered collection of intervals."""
    if isinstance(node, Union):
        return Sequence(node.parts, "list")
    return node


def _ordered_equal(pred_items, gold_items) -> bool:
    return len(pred_items) == len(gold_items) and all(nodes_equal(p, g) for p, g in zip(pred_items, gold_items))


def _unordered_equal(pred_items, gold_items) -> bool:
    """Each gold item matched by a different pred item (equality is transitive, so greedy works)."""
    remaining = list(pred_items)
    for g in gold_items:
        match = next((i for i, p in enumerate(remaining) if nodes_equal(p, g)), None)
        if match is None:
            return False
        remaining.pop(match)
    return not remaining
