"""What label each built-in reward function grades, declared when it is registered.

Each check is ``check(label, metadata) -> None`` when the function can grade ``label``, else
the phrase of what it expects; slime-core runs it on every record before a run starts
(``slime_core.data.labels``), so that a label of the wrong kind (a dict for ``math``, a
missing answer for ``exact_match``) is an error naming file:line instead of a reward of 0
on every sample. The checks look at the label's kind only: whether an answer is right is
the grader's business. They import nothing, so checking a large file is quick.
"""

from __future__ import annotations

from typing import Any

_SCALAR = (str, int, float)
ANSWER = "text or a number (the reference answer), or a list of them (any of which is right)"


def _answer(value: Any) -> bool:
    """A non-empty answer: text or a number (booleans are neither)."""
    if isinstance(value, bool) or not isinstance(value, _SCALAR):
        return False
    return not isinstance(value, str) or bool(value.strip())


def answer(label: Any, metadata: dict | None = None) -> str | None:
    """``math``, ``deepscaler``, ``dapo``: an answer, or a list of acceptable ones."""
    if isinstance(label, (list, tuple)):
        return None if label and all(_answer(item) for item in label) else ANSWER
    return None if _answer(label) else ANSWER


def exact_text(label: Any, metadata: dict | None = None) -> str | None:
    """``exact_match``: one answer, compared as text."""
    return None if _answer(label) else "text or a number (compared with the response as text)"


def reference(label: Any, metadata: dict | None = None) -> str | None:
    """``f1``: a reference answer, a list of them, or SQuAD's ``{"text": [...]}``."""
    if isinstance(label, dict) and "text" in label:
        label = label["text"]
    if answer(label) is None:
        return None
    return 'text or a list of texts (the reference answers), or {"text": [...]}'


def choice(label: Any, metadata: dict | None = None) -> str | None:
    """``gpqa``, ``multiple_choice``: a letter or an option's text, or a 0-based position."""
    if isinstance(label, bool) or not isinstance(label, (str, int)) or (isinstance(label, str) and not label.strip()):
        return 'an option letter ("B"), the text of the right option, or its 0-based position'
    return None


def code_tests(label: Any, metadata: dict | None = None) -> str | None:
    """``code``: the test cases, in ``metadata["tests"]`` or else in the label."""
    tests = (metadata or {}).get("tests", label)
    if isinstance(tests, str) and tests.strip():
        return None
    if isinstance(tests, dict) and "inputs" in tests and "outputs" in tests:
        return None
    if isinstance(tests, (list, tuple)) and tests and all(isinstance(t, (dict, str)) for t in tests):
        return None
    return (
        'test cases (in metadata["tests"] or the label): assert statements as text, a list of '
        '{"input", "output"} dicts, or {"inputs": [...], "outputs": [...]}'
    )
