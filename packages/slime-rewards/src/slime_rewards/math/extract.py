"""Find the final answer in a model response.

Order of trust, first hit wins:

1. the last ``\\boxed{...}`` / ``\\fbox{...}`` (braces balanced, so nested
   ``\\boxed{\\frac{1}{\\sqrt{2}}}`` works);
2. the last answer phrase: "The final answer is X", "Final Answer: X", "The answer is X",
   "Answer: X", "The correct option is X", "#### X" (X runs to the end of its sentence;
   a math span in it wins);
3. a concluding last paragraph ("Therefore, the area is $12\\pi$.", "So there are 35
   ways."): from its last sentence with a concluding word on, the last math span, else
   the last number, of the sentences that are not remarks ("Note that $\\pi \\approx
   3.14$."). Only the concluding sentence itself may be left without a full stop.

A reasoning model's answer is read after its last ``</think>``, if anything follows it; one
cut off before ``</think>`` has not answered.
A response with none of these has no answer (the grader scores it as wrong), and so has a
response whose last box is cut off (``... the answer is \\boxed{1``): it was truncated
while writing its final answer, whatever it boxed before. The third rule needs a
concluding word on purpose, and no unfinished sentence after it: a response cut off
mid-computation ("Case 1: x = 12", "so 9 * 60 = 540 meters. But wait, we should also")
has not answered, even when its last number happens to be right.
"""

from __future__ import annotations

import re

from slime_rewards.math.normalize import matching_brace

THINK_START, THINK_END = "<think>", "</think>"
_BOX = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_PHRASE = re.compile(
    r"(?:\banswer(?:\s*\(s\))?[\s*_]*(?:is\b|:|=)|final\s+answer[ \t*_#:]*\n"
    r"|\b(?:correct|right|best)\s+(?:option|choice)\s+is\b)[ \t*_:]*|####[ \t]*",
    re.IGNORECASE,
)
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
_CONCLUSION = re.compile(
    r"\b(?:therefore|thus|hence|so|in total|altogether|in conclusion|finally|overall|answer|result)\b|\\therefore|∴",
    re.IGNORECASE,
)
# A paragraph that ends like a finished sentence (not cut off mid-word by a length limit).
_FINISHED = re.compile(r"(?:[.!)\]}$\d]|\\[)\]])[\s*_\"']*$")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
# A sentence that approximates or checks the answer rather than states it.
_REMARK = re.compile(r"\\approx|≈|\bapproximately\b|\broughly\b|^\W*(?:note|check|verify|indeed)\b", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:\s*/\s*\d+)?\s*%?")
# Where an answer phrase's text stops being the answer: the sentence ends, or a reason or
# remark begins ("5 because ...", "5, which ...", "5 (since 2 + 3 = 5)", "5, i.e. five").
_SENTENCE_END = re.compile(
    r"\.(?=\s|$)|!(?=\s*$|\s+[A-Z])|;\s|\s(?:because|since|which|where|as)\s|,\s(?:so|and so|which|since)\s"
    r"|\s\((?:since|because|as|by|from|using|which|where|note|check|i\.e\.|e\.g\.)\b|,?\s(?:i\.e\.|that is,)\s"
)


def boxed_spans(text: str) -> list[tuple[int, str]]:
    """(position, content) of every complete ``\\boxed``/``\\fbox`` in `text`, in order."""
    spans = []
    for match in _BOX.finditer(text):
        i = match.end()
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            end = matching_brace(text, i)
            if end is not None:
                spans.append((match.start(), text[i + 1 : end].strip()))
        elif i < len(text) and i > match.end():  # "\boxed 5": one token after a space
            token = re.match(r"[^\s$.,]+", text[i:])
            if token:
                spans.append((match.start(), token.group(0)))
    return spans


def last_boxed(text: str) -> str | None:
    """Content of the last complete boxed span, or None."""
    spans = boxed_spans(text)
    return spans[-1][1] if spans else None


def extract_answer(text: str) -> str | None:
    """The final answer of a response (see the module docstring), or None if it gives none."""
    text = after_reasoning(text or "")
    if not text or ends_in_open_box(text):
        return None
    return last_boxed(text) or answer_after_phrase(text) or concluding_answer(text)


def after_reasoning(text: str) -> str:
    """The text after the last ``</think>``, where a reasoning model states its answer (drafts
    boxed while thinking do not count); the whole text when nothing follows it, and nothing
    when a ``<think>`` is never closed (the model was cut off while reasoning)."""
    _, closed, final = text.rpartition(THINK_END)
    if not closed:
        return "" if THINK_START in text else text
    return final if final.strip() else text


def ends_in_open_box(text: str) -> bool:
    """Whether the last ``\\boxed``/``\\fbox`` was cut off: its brace never closes, or nothing
    follows the command."""
    boxes = list(_BOX.finditer(text))
    if not boxes:
        return False
    spans = boxed_spans(text)
    if spans and spans[-1][0] == boxes[-1].start():
        return False
    after = text[boxes[-1].end() :].strip()
    return after == "" or after.startswith("{")


def answer_after_phrase(text: str) -> str | None:
    """X from the last "answer is X" / "Answer: X" / "#### X", or None."""
    matches = list(_PHRASE.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end() :]
    line = _first_nonempty_line(rest)
    return _trim_sentence(line) if line else None


def concluding_answer(text: str) -> str | None:
    """The value a finished last paragraph concludes with (see the module docstring)."""
    paragraphs = [p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    if not paragraphs:
        return None
    sentences = _SENTENCE_BREAK.split(paragraphs[-1].strip())
    concluding = [i for i, sentence in enumerate(sentences) if _CONCLUSION.search(sentence)]
    if not concluding:
        return None
    if concluding[-1] < len(sentences) - 1 and not _FINISHED.search(paragraphs[-1]):
        return None  # cut off after the conclusion, in the middle of another thought
    values = [_last_value(s) for s in sentences[concluding[-1] :] if not _REMARK.search(s)]
    return next((v for v in reversed(values) if v), None)


def _last_value(sentence: str) -> str | None:
    """The last math span of a sentence, else its last number, else None."""
    spans = [next(g for g in m.groups() if g is not None) for m in _MATH_SPAN.finditer(sentence)]
    if spans:
        return spans[-1].strip()
    numbers = _NUMBER.findall(sentence)
    return numbers[-1].strip() if numbers else None


def _first_nonempty_line(rest: str) -> str | None:
    """The answer text after a phrase: the rest of its line, or the next non-empty line.

    A display block opened on that line (``$$``, ``\\[``) is followed to its close.
    """
    rest = rest.lstrip(" \t")
    if rest.startswith("\n"):
        rest = rest.lstrip()
    for opener, closer in (("$$", "$$"), ("\\[", "\\]")):
        if rest.startswith(opener):
            end = rest.find(closer, len(opener))
            if end != -1:
                return rest[: end + len(closer)]
    line = rest.split("\n", 1)[0].strip()
    return line or None


def _trim_sentence(line: str) -> str | None:
    """Cut an answer phrase's text to the answer: a math span if it has one, else its sentence."""
    line = line.strip().strip("*_").strip()
    spans = list(_MATH_SPAN.finditer(line))
    if spans and line[: spans[0].start()].strip(" :*_\"'(") == "":
        return _joined_spans(line, spans)
    end = _SENTENCE_END.search(line)
    answer = line[: end.start()] if end else line
    answer = re.sub(r"^(?:therefore|thus|then|simply|exactly)\b\s*,?", "", answer.strip(), flags=re.I)
    answer = answer.strip().strip("*_\"'").strip()
    return answer or None


def _joined_spans(line: str, spans: list[re.Match]) -> str:
    """The first math span, plus any that follow it joined only by ", ", "and" or "or"."""
    parts = [next(g for g in spans[0].groups() if g is not None)]
    for before, span in zip(spans, spans[1:]):
        between = line[before.end() : span.start()].strip()
        if not re.fullmatch(r",?\s*(?:and|or)?\s*,?", between):
            break
        parts.append(next(g for g in span.groups() if g is not None))
    return ", ".join(p.strip() for p in parts)
