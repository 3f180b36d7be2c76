"""Normalise a LaTeX or plain-text math answer into one canonical spelling.

Two answers that a human would read as the same *text* should normalise to the same
string: ``$\\dfrac{1}{2}$.``, ``\\frac12`` and ``\\left(\\frac{1}{2}\\right)`` all become
``\\frac{1}{2}``. Normalisation never decides mathematical equality (``0.5`` stays ``0.5``);
that is `equivalence`'s job. It keeps single spaces, because units and text answers
("5 apples", "no solution") need word boundaries; `compact` removes them.

Markers that later stages read: a trailing ``%`` (percent), ``°`` (degrees), ``\\$``
(currency).
"""

from __future__ import annotations

import re

# Commands whose braced argument is kept and the command dropped.
_UNWRAP = (
    "boxed",
    "fbox",
    "text",
    "textbf",
    "textit",
    "textrm",
    "textsf",
    "texttt",
    "textnormal",
    "mathrm",
    "mathbf",
    "mathit",
    "mathsf",
    "mathtt",
    "mathnormal",
    "mbox",
    "hbox",
    "operatorname",
    "emph",
    "bm",
    "boldsymbol",
    "pmb",
    "underline",
)
# Commands (and their arguments, if any) that only change how things look.
_SIZING = re.compile(r"\\(?:left|right|middle|[bB]igg?[lrm]?)(?![a-zA-Z])")
_DISPLAY = re.compile(r"\\(?:displaystyle|textstyle|scriptstyle|limits|nolimits)(?![a-zA-Z])")
_SPACING = re.compile(r"(?<!\\)\\(?:quad|qquad|enspace|thinspace|medspace|thickspace|[,:;! ])|~")
_HSPACE = re.compile(r"\\[hv]space\*?\{[^{}]*\}|\\phantom\{[^{}]*\}")
_UNICODE = {
    "−": "-",
    "–": "-",
    "—": "-",
    "×": r"\times ",
    "÷": r"\div ",
    "·": r"\cdot ",
    "⋅": r"\cdot ",
    "π": r"\pi ",
    "∞": r"\infty ",
    "≤": r"\le ",
    "≥": r"\ge ",
    "≠": r"\ne ",
    "√": r"\sqrt",
    "∪": r"\cup ",
    "∩": r"\cap ",
    "∈": r"\in ",
    "ℝ": r"\mathbb{R}",
    "∅": r"\emptyset ",
    "⁰": "^0",
    "¹": "^1",
    "²": "^2",
    "³": "^3",
    "º": "°",
    "’": "'",
    "\u00a0": " ",
    "\u2009": " ",
    "\u202f": " ",
}
_RELATIONS = [
    (r"\\(?:leq?slant|leqq|leq?)(?![a-zA-Z])|<=", r"\\le "),
    (r"\\(?:geq?slant|geqq|geq?)(?![a-zA-Z])|>=", r"\\ge "),
    (r"\\(?:neq?)(?![a-zA-Z])|!=", r"\\ne "),
    (r"\\(?:lt)(?![a-zA-Z])", "<"),
    (r"\\(?:gt)(?![a-zA-Z])", ">"),
]
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ(?![a-zA-Z])|\\degree(?![a-zA-Z])|\^\s*\{\s*o\s*\}")
# A trailing modulus restates the congruence's modulus: "7 \\pmod{12}", "x \\equiv 3 (mod 7)".
_MODULUS = re.compile(r"\s*(?:\\pmod\s*\{[^{}]*\}|\\pmod\s*\d+|\(\s*\\?mod\s*\d+\s*\))\s*$")
_THOUSANDS = re.compile(r"(?<![\d.])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])")


def normalize_answer(text: str) -> str:
    """The canonical spelling of an answer (single spaces kept, see module docstring)."""
    s = str(text).strip()
    for old, new in _UNICODE.items():
        s = s.replace(old, new)
    s = strip_math_delimiters(s)
    s = re.sub(r"\\[dtc]frac(?![a-zA-Z])", r"\\frac", s)
    s = re.sub(r"\\[dt]binom(?![a-zA-Z])", r"\\binom", s)
    s = choose_to_binom(s)
    s = _HSPACE.sub(" ", s)
    s = s.replace(",\\!", ",")  # MATH's thousands separator: 1,\!000
    s = _MODULUS.sub("", s)
    s = _SIZING.sub("", s)
    s = _DISPLAY.sub("", s)
    s = re.sub(r"\\color\{[^{}]*\}", "", s)
    s = unwrap_commands(s, _UNWRAP)
    s = _SPACING.sub(" ", s)
    s = _canonical_symbols(s)
    s = fix_shorthand(s)
    s = remove_thousands_separators(s)
    s = re.sub(r"\s+", " ", s).strip()
    s = _strip_trailing_punctuation(s)
    return _strip_outer_braces(s)


def compact(text: str) -> str:
    """`text` without any whitespace: the form used for exact string comparison."""
    return re.sub(r"\s+", "", text)


def strip_math_delimiters(s: str) -> str:
    """Drop ``$``, ``$$``, ``\\(..\\)`` and ``\\[..\\]`` (but not the currency sign ``\\$``)."""
    s = re.sub(r"\\[()]", " ", s)
    s = re.sub(r"(?<!\\)\\\[|(?<!\\)\\\]", " ", s)
    return re.sub(r"(?<!\\)\$", " ", s).strip()


def unwrap_commands(s: str, names: tuple[str, ...]) -> str:
    """Replace ``\\name{arg}`` by `` arg `` for every name, innermost braces kept balanced."""
    pattern = re.compile(r"\\(?:" + "|".join(names) + r")\s*(?=\{)")
    while True:
        match = pattern.search(s)
        if match is None:
            return s
        end = matching_brace(s, match.end())
        if end is None:
            return s[: match.start()] + s[match.end() + 1 :]
        s = s[: match.start()] + " " + s[match.end() + 1 : end] + " " + s[end + 1 :]


def matching_brace(s: str, start: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at `start`; escaped ``\\{``/``\\}`` do not count."""
    depth = 0
    i = start
    while i < len(s):
        char = s[i]
        if char == "\\":
            i += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def choose_to_binom(s: str) -> str:
    """``{n \\choose k}`` (the plain-TeX binomial) → ``\\binom{n}{k}``; without a group
    around it, ``\\choose`` splits the whole answer."""
    pattern = re.compile(r"\\choose(?![a-zA-Z])")
    while True:
        match = pattern.search(s)
        if match is None:
            return s
        open_at = _enclosing_brace(s, match.start())
        if open_at is None:
            head, top_start, end, tail = "", 0, len(s), ""
        else:
            end = matching_brace(s, open_at)
            if end is None:
                return s
            head, top_start, tail = s[:open_at], open_at + 1, s[end + 1 :]
        top, bottom = s[top_start : match.start()].strip(), s[match.end() : end].strip()
        s = f"{head}\\binom{{{top}}}{{{bottom}}}{tail}"


def _enclosing_brace(s: str, pos: int) -> int | None:
    """Index of the unescaped ``{`` that encloses position `pos`, or None."""
    depth = 0
    for i in range(pos - 1, -1, -1):
        escaped = i > 0 and s[i - 1] == "\\"
        if s[i] == "}" and not escaped:
            depth += 1
        elif s[i] == "{" and not escaped:
            if depth == 0:
                return i
            depth -= 1
    return None


def fix_shorthand(s: str) -> str:
    """Brace the arguments of ``\\frac12``, ``\\frac1{2}``, ``\\sqrt2``, ``\\frac{\\pi}4``."""
    arg = r"(\{(?:[^{}]|\{[^{}]*\})*\}|\\[a-zA-Z]+|[0-9a-zA-Z])"
    frac = re.compile(r"\\(frac|binom)\s*" + arg + r"\s*" + arg)
    s = frac.sub(lambda m: f"\\{m.group(1)}{_brace(m.group(2))}{_brace(m.group(3))}", s)
    sqrt = re.compile(r"\\sqrt\s*(\[[^\]]*\])?\s*" + arg)
    return sqrt.sub(lambda m: f"\\sqrt{m.group(1) or ''}{_brace(m.group(2))}", s)


def remove_thousands_separators(s: str) -> str:
    """``1,000,000``, ``1{,}000`` and ``10\\,000`` lose their separators when the whole answer is
    that number.

    Inside a longer answer a comma between digit groups is more often a list separator
    (``(1,000)`` could be a pair), so only a lone number is rewritten.
    """
    s = s.replace("{,}", ",")
    candidate = s.strip()
    if re.fullmatch(r"-?\d{1,3}(?: \d{3})+(?:\.\d+)?", candidate):
        return candidate.replace(" ", "")
    if re.fullmatch(r"-?\s*(\\\$)?\s*" + _THOUSANDS.pattern + r"\s*(\\%|%|[a-zA-Z ]*)", candidate):
        return _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), s)
    return s


def _canonical_symbols(s: str) -> str:
    """One spelling each for degrees, percent, relations, infinity, the reals, the empty set."""
    s = _DEGREES.sub("°", s)
    s = s.replace("\\%", "%")
    for pattern, repl in _RELATIONS:
        s = re.sub(pattern, repl, s)
    s = re.sub(r"\\(?:varnothing|emptyset)(?![a-zA-Z])|\\\{\s*\\\}", r"\\emptyset ", s)
    s = re.sub(r"\\mathbb\s*\{?\s*R\s*\}?", r"\\mathbb{R}", s)
    s = re.sub(r"\\(?:infinity|infin)(?![a-zA-Z])|(?<![a-zA-Z\\])(?:infinity|infty|inf)(?![a-zA-Z])", r"\\infty ", s)
    s = re.sub(r"\\(?:dots|cdots|ldots)(?![a-zA-Z])", "...", s)
    s = re.sub(r"\\(?:rangle)(?![a-zA-Z])", r"\\rangle ", s)
    return re.sub(r"\\(?:mathrm|rm)\s*\{?\s*e\s*\}?(?![a-zA-Z])", "e", s)


def _strip_trailing_punctuation(s: str) -> str:
    """Drop sentence punctuation after the answer (``5.`` → ``5``, but ``...`` kept).

    ``!`` stays: inside an answer it is a factorial (``10!``); extraction has already cut an
    exclamation mark off a sentence."""
    while s and s[-1] in ".,;:" and not s.endswith("..."):
        s = s[:-1].rstrip()
    return s


def _strip_outer_braces(s: str) -> str:
    """``{5}`` → ``5`` when one brace pair encloses the whole answer."""
    while s.startswith("{") and matching_brace(s, 0) == len(s) - 1:
        s = s[1:-1].strip()
    return s


def _brace(arg: str) -> str:
    return arg if arg.startswith("{") else "{" + arg + "}"
