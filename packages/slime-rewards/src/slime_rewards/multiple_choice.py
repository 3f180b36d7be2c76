"""Multiple-choice grading (GPQA, MMLU-style): which option letter did the model pick?

Valid letters come from ``metadata["valid_letters"]`` (``"ABCDE"`` or a list), else from
``metadata["choices"]`` (a list of option texts: A, B, ... by position), else A–D.

Only the final answer is read: the text after the last ``</think>`` if there is one. The
response's letter, first hit wins:

1. the last boxed span (``\\boxed{D}``, ``\\boxed{\\text{(D)}}``);
2. the last answer phrase: "The answer is (B)", "**Answer: C**", "Answer: option C",
   "the correct choice is B", "The answer is \\(D\\)"; a lower-case letter only in brackets
   or at the end of its line ("Answer: b"), since "the answer is a function" is no choice;
3. a last line that is only a letter ("C", "(C)", "**C.**");
4. with choices given, an answer phrase whose text is exactly one option's text.

A letter outside the valid set counts as no answer. The label may be a letter (``"B"``,
``"(B)"``), the text of the correct option (needs ``choices``), or an int (0-based position).
"""

from __future__ import annotations

import re
import string

from slime_rewards.math.extract import answer_after_phrase, last_boxed
from slime_rewards.math.normalize import normalize_answer

_DEFAULT_LETTERS = "ABCD"
_PHRASE = re.compile(
    r"(?:answer|choice|option)\s*(?:is|:|=)(?:\s+(?:option|choice))?[\s:*_]*(?:\\boxed\{|\\text(?:bf)?\{|\$|\\\()*\s*"
    r"(?:\(([A-Za-z])\)|\[([A-Za-z])\]"  # (B), [b]: unambiguous in either case
    r"|(?-i:([A-Z]))(?![A-Za-z0-9])(?!\s+(?!(?:because|since|as|which)\b)(?-i:[a-z]))"  # bare B, not "A good"
    r"|(?-i:([a-z]))(?=[.)*_]*[ \t]*(?:\n|$)))",  # bare b ending its line
    re.IGNORECASE,
)
_LONE = re.compile(r"[\s*_($\[{]*(?:\\text(?:bf)?\{)?\(?([A-Z])\)?[\s*_).:}\]$]*")


def valid_letters(metadata: dict | None) -> str:
    """The option letters this sample allows (see the module docstring)."""
    metadata = metadata or {}
    if metadata.get("valid_letters"):
        return "".join(metadata["valid_letters"]).upper()
    if metadata.get("choices"):
        return string.ascii_uppercase[: len(metadata["choices"])]
    return _DEFAULT_LETTERS


def response_letter(response: str, letters: str, choices: list | None = None) -> str | None:
    """The letter the response picked, or None (see the module docstring for the order)."""
    response = (response or "").rsplit("</think>", 1)[-1]
    for finder in (_boxed_letter, _phrase_letter, _lone_letter):
        letter = finder(response)
        if letter is not None:
            return letter if letter in letters else None
    return _letter_by_text(response, letters, choices)


def label_letter(label, letters: str, choices: list | None = None) -> str:
    """The correct letter from a label that is a letter, an option's text, or a 0-based int."""
    if isinstance(label, int) and not isinstance(label, bool) and 0 <= label < len(letters):
        return letters[label]
    text = str(label).strip()
    match = re.fullmatch(r"\(?([A-Za-z])\)?\.?", text)
    if match and match.group(1).upper() in letters:
        return match.group(1).upper()
    by_text = _letter_by_text(text, letters, choices, whole=True)
    if by_text is None:
        raise ValueError(
            f"multiple-choice label {label!r} is neither a letter in {letters!r} nor the text of one of "
            f"metadata['choices']; store the correct letter (or the option list) in the sample"
        )
    return by_text


def multiple_choice_score(response: str, label, metadata: dict | None) -> float:
    """1.0 when the response picks the labelled option, else 0.0."""
    metadata = metadata or {}
    letters = valid_letters(metadata)
    choices = metadata.get("choices")
    gold = label_letter(label, letters, choices)
    return 1.0 if response_letter(response, letters, choices) == gold else 0.0


def _boxed_letter(response: str) -> str | None:
    span = last_boxed(response)
    if span is None:
        return None
    match = re.fullmatch(r"\(?([A-Z])\)?(?:[\s.:].*)?", normalize_answer(span))
    return match.group(1) if match else None


def _phrase_letter(response: str) -> str | None:
    matches = list(_PHRASE.finditer(response))
    if not matches:
        return None
    return next(letter for letter in matches[-1].groups() if letter).upper()


def _lone_letter(response: str) -> str | None:
    lines = [line for line in response.strip().splitlines() if line.strip()]
    if not lines:
        return None
    match = _LONE.fullmatch(lines[-1])
    return match.group(1) if match else None


def _letter_by_text(text: str, letters: str, choices: list | None, whole: bool = False) -> str | None:
    """The letter whose option text equals the answer text (case and spacing ignored)."""
    if not choices:
        return None
    answer = text if whole else answer_after_phrase(text)
    if answer is None:
        return None
    key = _text_key(answer)
    hits = [letters[i] for i, choice in enumerate(choices[: len(letters)]) if _text_key(str(choice)) == key]
    return hits[0] if len(hits) == 1 else None


def _text_key(text: str) -> str:
    return re.sub(r"[\s.$]+", "", normalize_answer(text)).lower()
