"""DAPO's reward: the answer on the last ``Answer:`` line, normalised the Minerva way.

DAPO (and the Minerva evaluation it follows) does not test mathematical equivalence: it
normalises both strings (last side of an equation, units and filler words removed,
``\\text{}``/``\\boxed{}`` unwrapped, ``\\frac12`` braced, thousands commas dropped) and
compares them exactly. The reward is +1 for a match and -1 otherwise, including a
response with no ``Answer:`` line. This module reimplements that behaviour so runs that
train with ``--rm-type dapo`` score like DAPO; use ``math`` for equivalence-aware grading.
Two string slips of the original are not copied: the LaTeX space ``\\ `` no longer eats
half of a row break ``\\\\ `` (matrices), and only correctly grouped thousands separators
are dropped (``1,000`` is 1000, ``1,2`` stays a list).
"""

from __future__ import annotations

import re

from slime_rewards.math.normalize import fix_shorthand, unwrap_commands

INVALID = "[INVALID]"
_ANSWER_LINE = re.compile(r"Answer\s*:[ \t]*([^\n]*)", re.IGNORECASE)
# Replaced (left) by (right) before comparison, in this order.
_SUBSTITUTIONS = [
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
]
# Units and filler words DAPO/Minerva drop from answers.
_FILLER = [
    "square",
    "ways",
    "integers",
    "dollars",
    "mph",
    "inches",
    "hours",
    "km",
    "units",
    "\\ldots",
    "sue",
    "points",
    "feet",
    "minutes",
    "digits",
    "cents",
    "degrees",
    "cm",
    "gm",
    "pounds",
    "meters",
    "meals",
    "edges",
    "students",
    "childrentickets",
    "multiples",
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    r"\mathrm{th}",
    r"^\circ",
    r"^{\circ}",
    r"\;",
    r",\!",
    "{,}",
    '"',
    "\\dots",
]


def dapo_score(response: str, label) -> dict:
    """``{"score": +1.0 | -1.0, "acc": bool, "pred": normalised answer or "[INVALID]"}``."""
    answer = last_answer_line(response or "")
    golds = label if isinstance(label, (list, tuple)) else [label]
    if answer is None:
        return {"score": -1.0, "acc": False, "pred": INVALID}
    pred = normalize_minerva(answer)
    acc = any(pred == normalize_minerva(str(g)) for g in golds if g is not None)
    return {"score": 1.0 if acc else -1.0, "acc": acc, "pred": pred}


def last_answer_line(response: str) -> str | None:
    """The text after the last ``Answer:`` in the response (to the end of its line)."""
    matches = _ANSWER_LINE.findall(response)
    return matches[-1].strip() if matches else None


def normalize_minerva(answer: str) -> str:
    """Minerva-style canonical string (see the module docstring)."""
    s = answer.split("=")[-1]
    s = re.sub(r"(?<!\\)\\ ", "", s)  # a LaTeX space, not the end of a row break
    for old, new in _SUBSTITUTIONS:
        s = s.replace(old, new)
    for word in _FILLER:
        s = s.replace(word, "")
    spans = re.findall(r"\$(.*?)\$", s)
    if spans:  # the first math span, as DAPO's ``(.*?)(\$)(.*?)(\$)(.*)`` substitution keeps
        s = spans[0]
    s = unwrap_commands(s, ("text", "textbf", "overline", "boxed"))
    s = fix_shorthand(s).replace(" ", "")
    s = s.replace("$", "")
    if re.fullmatch(r"\d{1,3}(?:,\d{3})+", s):
        s = s.replace(",", "")
    return s.strip()
