"""Grade a math response against its reference answer, as a careful human would.

``grade_math(response, label)`` = extract the final answer (`extract`), normalise both
(`normalize`), then compare: equal strings, a multiple-choice letter, or mathematical
equivalence (`equivalence`) run under a per-comparison time limit (`time_limit`; a
comparison that runs out of time counts as not equal).
"""

from __future__ import annotations

import decimal
import re

from slime_rewards.math.equivalence import equivalent
from slime_rewards.math.extract import after_reasoning, boxed_spans, extract_answer, last_boxed
from slime_rewards.math.normalize import compact, normalize_answer
from slime_rewards.math.structure import Sequence, parse_structure
from slime_rewards.math.time_limit import call_with_time_limit

DEFAULT_TIMEOUT = 5.0  # seconds per comparison (the `math_timeout` option)
_LETTER = re.compile(r"\(?([A-J])\)?")
_LETTER_PREFIX = re.compile(
    r"(?:(?:option|choice)\s+)?\(?([A-J])\)?(?![a-zA-Z0-9)])"
    r"(?!\s*(?:,|/|&|\band\b|\bor\b)\s*\(?[A-J]\)?(?![a-zA-Z0-9]))",  # not "B and C": two picks
    re.IGNORECASE,
)


def grade_math(response: str, label, timeout: float = DEFAULT_TIMEOUT) -> bool:
    """Whether the final answer of `response` matches `label` (a string, number, or a list of
    acceptable answers). A response without an answer is wrong."""
    golds = reference_answers(label)
    if not golds:
        raise ValueError(f"math grading needs a reference answer, got label={label!r}; set sample.label")
    for gold in golds:
        if any(answers_match(pred, gold, timeout) for pred in predicted_answers(response, gold)):
            return True
    return False


def answers_match(pred: str, gold: str, timeout: float = DEFAULT_TIMEOUT) -> bool:
    """Whether two extracted answers are equivalent (normalised, then compared)."""
    p, g = normalize_answer(pred), normalize_answer(gold)
    if not p:
        return False
    if compact(p) == compact(g):
        return True
    letter = _LETTER.fullmatch(compact(g))
    if letter:
        return choice_letter(p) == letter.group(1)
    try:
        return call_with_time_limit(equivalent, (p, g), timeout, preload=(equivalent.__module__,))
    except TimeoutError:
        return False


def predicted_answers(response: str, gold: str) -> list[str]:
    """The response's answer; for a gold with k parts, also its last k boxed answers joined
    (``x = \\boxed{2}, y = \\boxed{3}`` answers ``(2, 3)``)."""
    answer = extract_answer(response)
    if not answer:
        return []
    answers = [answer]
    parts = _part_count(gold)
    spans = boxed_spans(after_reasoning(response))
    if parts > 1 and len(spans) >= parts:
        answers.append(", ".join(content for _, content in spans[-parts:]))
    return answers


def choice_letter(answer: str) -> str | None:
    """The option letter an answer starts with: ``C``, ``(C)``, ``(C) 15``, ``option C``;
    None for several letters (``B and C``, ``(A), (D)``), which pick more than one option."""
    match = _LETTER_PREFIX.match(answer.strip())
    return match.group(1).upper() if match else None


def reference_answers(label) -> list[str]:
    """The acceptable answers in a label: a list is any-of; a solution text gives its boxed
    answer; ``#### 42`` (GSM8K) gives 42; numbers are written without exponents."""
    if label is None:
        return []
    if isinstance(label, (list, tuple)):
        return [a for item in label for a in reference_answers(item)]
    if isinstance(label, bool):
        return [str(label)]
    if isinstance(label, float):
        return [format(decimal.Decimal(repr(label)), "f")]
    text = str(label).strip()
    if "\\boxed" in text or "\\fbox" in text:
        text = last_boxed(text) or text
    elif "####" in text:
        text = text.rsplit("####", 1)[1].strip()
    return [text] if text else []


def _part_count(gold: str) -> int:
    shape = parse_structure(normalize_answer(gold))
    return len(shape.items) if isinstance(shape, Sequence) else 1
