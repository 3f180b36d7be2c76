"""Split a normalised answer into its shape: scalar, sequence, set, interval, union, equation, matrix.

The shape decides how two answers are compared (`equivalence`): a set ignores order, a
tuple does not, an interval's brackets matter, a tuple with a missing part is wrong.
Shapes are plain frozen dataclasses holding strings; the scalars inside are parsed later,
so this module never calls sympy.

Bracket conventions, as a reader would take them:

- ``\\{1, 2\\}`` is a set; ``1, 2`` (no brackets, or "1 and 2", "x = 1 or x = 2") is a list
  of values whose order does not matter (the solutions of an equation);
- ``(1, 2)`` is an ordered pair, which also reads as the open interval; ``[1, 2)``,
  ``(-\\infty, 3]`` are intervals; ``A \\cup B`` is a union;
- ``x \\le 3`` and ``-2 < x \\le 5`` are intervals too; ``x \\in [0, 1]`` is ``[0, 1]``;
- ``a \\pm b`` is the list ``a + b, a - b``;
- ``\\begin{pmatrix}...\\end{pmatrix}`` is a matrix; a single row or column is a tuple;
- ``\\mathbb{R}`` and "all real numbers" are the interval ``(-\\infty, \\infty)``; ``x \\ne 2`` and
  ``\\mathbb{R} \\setminus \\{2\\}`` are ``(-\\infty, 2) \\cup (2, \\infty)``;
- ``\\{x \\mid x \\le 3\\}`` (set-builder) is its condition, here ``(-\\infty, 3]``;
- ``\\emptyset``, "no solution" and "none" are the empty set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OPEN = {"(": ")", "[": "]", "{": "}", "\\{": "\\}", "\\langle": "\\rangle"}
_CLOSERS = {")", "]", "}", "\\}", "\\rangle"}
_BRACKET_TOKEN = re.compile(r"\\langle|\\rangle|\\\{|\\\}|[()\[\]{}]")
_MATRIX = re.compile(
    r"\\begin\{(?P<env>[pbBvV]?matrix|array)\}(?:\{[^{}]*\})?(?P<body>.*?)\\end\{(?P=env)\}", re.DOTALL
)
_INEQUALITY = re.compile(r"\\le |\\ge |<|>|\\le$|\\ge$")
_SET_BUILDER = re.compile(r"\\\{\s*[a-zA-Z]\s*(?:\\in\s*\\mathbb\{R\}\s*)?(?:\\mid|\||:)(.+)\\\}")
_EMPTY = re.compile(
    r"\\emptyset|(?:there (?:is|are) )?(?:no (?:real |such )?(?:solutions?|values?|roots?|numbers?)|none)",
    re.IGNORECASE,
)
# ``x \\ne 2`` and ``\\mathbb{R} \\setminus \\{2\\}``: every real number except one.
_ALL_BUT = re.compile(r"[a-zA-Z] ?\\ne ([^,]+)|\\mathbb\{R\} ?(?:\\setminus|\\backslash|-) ?\\\{([^,]+)\\\}")
_REALS = re.compile(r"\\mathbb\{R\}|(?:the set of )?(?:all )?real(?: number)?s", re.IGNORECASE)


@dataclass(frozen=True)
class Scalar:
    """One value: a number, an expression, a quantity with a unit, or a piece of text."""

    text: str


@dataclass(frozen=True)
class Sequence:
    """Several values. `opener`/`closer` are the brackets ('' when bare); `kind` says how to
    compare: 'set' and 'list' ignore order, 'tuple' keeps it, 'interval' keeps brackets too."""

    items: tuple
    kind: str  # "set" | "list" | "tuple" | "interval"
    opener: str = ""
    closer: str = ""


@dataclass(frozen=True)
class Union:
    """Intervals joined by ``\\cup``; order does not matter."""

    parts: tuple


@dataclass(frozen=True)
class Equation:
    """``lhs = rhs`` (or a chain ``a = b = c``): all sides, left to right."""

    sides: tuple


@dataclass(frozen=True)
class Matrix:
    """Rows of cells."""

    rows: tuple


def parse_structure(text: str):
    """The shape of a normalised answer (see the module docstring)."""
    text = text.strip()
    matrix = _matrix(text)
    if matrix is not None:
        return matrix
    builder = _SET_BUILDER.fullmatch(text)
    if builder and _encloses(text, "\\{", "\\}"):
        return parse_structure(builder.group(1))
    parts = split_top_level(text, r"\\cup ?")
    if len(parts) > 1:
        return Union(tuple(parse_structure(p) for p in parts))
    items = [p for p in split_top_level(text, r",|\s+(?:and|or)\s+|;") if p.strip()]
    if len(items) > 1:
        return Sequence(tuple(parse_structure(i) for i in items), "list")
    return _relation(text) or _bracketed(text) or _plus_minus(text) or Scalar(text)


def split_top_level(text: str, separator: str) -> list[str]:
    """Split `text` at matches of the `separator` regex that are outside every bracket."""
    depth_at = _depths(text)
    parts, start = [], 0
    for match in re.finditer(separator, text):
        if depth_at[match.start()] == 0 and match.end() > match.start():
            parts.append(text[start : match.start()].strip())
            start = match.end()
    parts.append(text[start:].strip())
    return parts


def _depths(text: str) -> list[int]:
    """Bracket depth before each character; (, [, {, \\{, \\langle open; their closers close."""
    depths = [0] * (len(text) + 1)
    depth, pos = 0, 0
    for match in _BRACKET_TOKEN.finditer(text):
        for i in range(pos, match.start()):
            depths[i] = depth
        for i in range(match.start(), match.end()):
            depths[i] = depth
        depth = depth + 1 if match.group() in _OPEN else max(0, depth - 1)
        pos = match.end()
    for i in range(pos, len(text) + 1):
        depths[i] = depth
    return depths


def _matrix(text: str) -> Matrix | None:
    match = _MATRIX.fullmatch(text)
    if match is None:
        return None
    rows = [r for r in re.split(r"\\\\", match.group("body")) if r.strip() and not r.strip().startswith("\\hline")]
    cells = tuple(tuple(Scalar(c.strip()) for c in row.split("&")) for row in rows)
    if len(cells) == 1 or all(len(row) == 1 for row in cells):
        flat = tuple(c for row in cells for c in row)
        return Sequence(flat, "tuple", "(", ")")
    return Matrix(cells)


def _relation(text: str):
    """Equations, inequalities (as intervals), ``x \\in S`` (as S) and all reals but one point."""
    member = split_top_level(text, r"\\in(?![a-zA-Z]) ?")
    if len(member) == 2 and member[1]:
        return parse_structure(member[1])
    excluded = _ALL_BUT.fullmatch(text)
    if excluded:
        point = Scalar((excluded.group(1) or excluded.group(2)).strip())
        below = Sequence((Scalar("-\\infty"), point), "interval", "(", ")")
        return Union((below, Sequence((point, Scalar("\\infty")), "interval", "(", ")")))
    if _INEQUALITY.search(text):
        interval = inequality_interval(text)
        if interval is not None:
            return interval
    sides = split_top_level(text, r"(?<![<>!\\])=|\\approx ?|\\equiv ?")
    if len(sides) > 1 and all(sides):
        return Equation(tuple(parse_structure(s) for s in sides))
    return None


def inequality_interval(text: str) -> Sequence | None:
    """``x > 3`` → ``(3, \\infty)``, ``-2 < x \\le 5`` → ``(-2, 5]``, ``3 \\ge x`` → ``(-\\infty, 3]``.

    Only one variable, at one end or in the middle of a chain; anything else is None.
    """
    pieces = re.split(r"(\\le |\\ge |<|>)", text.strip() + " ")
    values = [p.strip() for p in pieces[0::2]]
    ops = pieces[1::2]
    variables = [i for i, v in enumerate(values) if re.fullmatch(r"[a-zA-Z](?:_\{?\w+\}?)?", v)]
    if len(variables) != 1 or not all(values):
        return None
    i = variables[0]
    lower, upper = ("-\\infty", False), ("\\infty", False)
    for j, op in enumerate(ops):
        left, right = values[j], values[j + 1]
        less = op.strip() in ("<", "\\le")
        closed = op.strip() in ("\\le", "\\ge")
        if j + 1 == i:  # bound on the left of the variable
            bound = (left, closed)
            lower, upper = (bound, upper) if less else (lower, bound)
        elif j == i:  # bound on the right
            bound = (right, closed)
            lower, upper = (lower, bound) if less else (bound, upper)
        else:
            return None
    opener = "[" if lower[1] else "("
    closer = "]" if upper[1] else ")"
    return Sequence((Scalar(lower[0]), Scalar(upper[0])), "interval", opener, closer)


def _bracketed(text: str):
    """``\\{...\\}`` sets, ``(a, b)`` tuples, ``[a, b)`` intervals; ``(x)`` is just x."""
    if _EMPTY.fullmatch(text):
        return Sequence((), "set", "\\{", "\\}")
    if _REALS.fullmatch(text):
        return Sequence((Scalar("-\\infty"), Scalar("\\infty")), "interval", "(", ")")
    opener = next((o for o in sorted(_OPEN, key=len, reverse=True) if text.startswith(o)), None)
    closer = next((c for c in sorted(_CLOSERS, key=len, reverse=True) if text.endswith(c)), None)
    if opener is None or closer is None or not _encloses(text, opener, closer):
        return None
    inner = text[len(opener) : len(text) - len(closer)].strip()
    items = [parse_structure(i) for i in split_top_level(inner, ",")] if inner else []
    if opener == "\\{" or opener == "{" and closer == "}" and len(items) > 1:
        return Sequence(tuple(items), "set", "\\{", "\\}")
    if len(items) == 1 and opener in ("(", "[", "{") and _OPEN[opener] == closer:
        return items[0]
    if len(items) == 2 and (opener != "(" or closer != ")") and opener in "([" and closer in ")]":
        return Sequence(tuple(items), "interval", opener, closer)
    if opener == "\\langle":
        opener, closer = "(", ")"
    return Sequence(tuple(items), "tuple", opener, closer)


def _encloses(text: str, opener: str, closer: str) -> bool:
    """True when the opening bracket at 0 is closed only by the last character(s)."""
    depths = _depths(text)
    end = len(text) - len(closer)
    return all(depths[i] > 0 for i in range(len(opener), end)) and depths[end] == 1


def _plus_minus(text: str) -> Sequence | None:
    """``a \\pm b`` → the list ``a + b, a - b`` (first ``\\pm``/``\\mp`` only)."""
    match = re.search(r"\\(pm|mp)(?![a-zA-Z])", text)
    if match is None:
        return None
    head, tail = text[: match.start()], text[match.end() :]
    signs = ("+", "-") if match.group(1) == "pm" else ("-", "+")
    return Sequence(tuple(parse_structure(f"{head}{s}{tail}") for s in signs), "list")
