"""Find the final answer in a model response.

Order of trust, first hit wins:

1. the last complete ``\\boxed{...}`` / ``\\fbox{...}`` (braces balanced, so nested
   ``\\boxed{\\frac{1}{\\sqrt{2}}}`` works; a box cut off by truncation is skipped);
2. the last answer phrase: "The final answer is X", "Final Answer: X", "The answer is X",
   "Answer: X", "#### X" (X runs to the end of its sentence; a math span in it wins);
3. a concluding last paragraph ("Therefore, the area is $12\\pi$.", "So there are 35
   ways."): its last math span, else its last number.

A response with none of these has no answer (the grader scores it as wrong). The third rule
needs a concluding word on purpose: a response cut off mid-computation ("Case 1: x = 12")
has not answered, even when its last number happens to be right.
"""

from __future__ import annotations

import re

from slime_rewards.math.normalize import matching_brace

_BOX = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_PHRASE = re.compile(
    r"(?:\banswer(?:\s*\(s\))?[\s*_]*(?:is\b|:|=)|final\s+answer[ \t*_#:]*\n)[ \t*_:]*|####[ \t]*",
    re.IGNORECASE,
)
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
_CONCLUSION = re.compile(
    r"\b(?:therefore|thus|hence|so|in total|altogether|in conclusion|finally|overall|answer|result)\b|\\therefore|∴",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:\s*/\s*\d+)?\s*%?")
_SENTENCE_END = re.compile(r"\.(?=\s|$)|;\s|\s(?:because|since|which|where|as)\s|,\s(?:so|and so|which|since)\s")


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
    if not text:
        return None
    return last_boxed(text) or answer_after_phrase(text) or concluding_answer(text)


def answer_after_phrase(text: str) -> str | None:
    """X from the last "answer is X" / "Answer: X" / "#### X", or None."""
    matches = list(_PHRASE.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end() :]
    line = _first_nonempty_line(rest)
    return _trim_sentence(line) if line else None


def concluding_answer(text: str) -> str | None:
    """The last math span (else number) of a last paragraph that states a conclusion."""
    paragraphs = [p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    if not paragraphs or not _CONCLUSION.search(paragraphs[-1]):
        return None
    last = paragraphs[-1]
    spans = [next(g for g in m.groups() if g is not None) for m in _MATH_SPAN.finditer(last)]
    if spans:
        return spans[-1].strip()
    numbers = _NUMBER.findall(last)
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
