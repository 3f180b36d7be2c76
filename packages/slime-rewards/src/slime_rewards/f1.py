"""SQuAD token F1 between the response's answer and the reference answer(s).

Both sides are normalised the SQuAD way (lowercase, punctuation and the articles
a/an/the removed, whitespace collapsed) and split into tokens; F1 is the harmonic mean of
token precision and recall over the multiset overlap. The label is a reference (a string,
or a number), a list of them (the best one scores), or a SQuAD-style ``{"text": [...]}``.
Only the final answer is graded: the text after the last ``</think>`` if there is one, and
in it the last boxed span or the text after an answer phrase ("The answer is ...",
"Answer: ...") when it has one, else all of it.
"""

from __future__ import annotations

import re
import string
from collections import Counter

from slime_rewards.math.extract import answer_after_phrase, last_boxed

_PUNCTUATION = set(string.punctuation)


def f1_score(response: str, label) -> float:
    """Best token F1 of the response's answer against the reference(s) in `label`."""
    golds = references(label)
    if not golds:
        raise ValueError(f"f1 needs a reference answer (a string or a list of strings), got label={label!r}")
    answer = answer_text(response or "")
    return max(token_f1(answer, gold) for gold in golds)


def references(label) -> list[str]:
    """The reference answers in a label (see the module docstring); None entries are skipped."""
    if isinstance(label, dict) and "text" in label:
        label = label["text"]
    if isinstance(label, (list, tuple)):
        return [str(gold) for gold in label if gold is not None]
    return [] if label is None or isinstance(label, dict) else [str(label)]


def answer_text(response: str) -> str:
    """The part of the response that is graded (see the module docstring)."""
    answer = response.rsplit("</think>", 1)[-1]
    return last_boxed(answer) or answer_after_phrase(answer) or answer


def token_f1(prediction: str, reference: str) -> float:
    """Token-level F1 of two strings after SQuAD normalisation (1.0 when both are empty)."""
    pred, gold = normalize_squad(prediction).split(), normalize_squad(reference).split()
    if not pred or not gold:
        return float(pred == gold)
    overlap = sum((Counter(pred) & Counter(gold)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred), overlap / len(gold)
    return 2 * precision * recall / (precision + recall)


def normalize_squad(text: str) -> str:
    """Lowercase, drop punctuation, drop articles, collapse whitespace."""
    text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
    text = re.sub(r"\b(?:a|an|the)\b", " ", text)
    return " ".join(text.split())
