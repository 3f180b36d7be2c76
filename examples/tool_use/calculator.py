"""The calculator tool: its call format and a safe evaluator of arithmetic.

The model calls the tool by writing ``<calc>EXPRESSION</calc>``; the tool answers
``<result>VALUE</result>`` (or ``<result>error: WHY</result>``). Expressions are integers
and decimals with ``+ - * /``, unary minus and parentheses. They are parsed by a small
recursive-descent parser, never by ``eval``: model output is untrusted text.
"""

from __future__ import annotations

import re
from fractions import Fraction

CALL_START, CALL_END = "<calc>", "</calc>"
RESULT_START, RESULT_END = "<result>", "</result>"
MAX_EXPRESSION_CHARS = 64  # longer calls are refused: the tool's work stays tiny

_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|(.))")


class CalculatorError(ValueError):
    """An expression the calculator cannot evaluate; the message is shown to the model."""


def pending_call(response: str) -> str | None:
    """The expression of the tool call that ends ``response``: the text between its last
    ``<calc>`` and the closing ``</calc>`` (None when the response does not end with a call)."""
    if not response.endswith(CALL_END):
        return None
    start = response.rfind(CALL_START)
    return response[start + len(CALL_START) if start >= 0 else 0 : -len(CALL_END)]


def tool_result(expression: str) -> str:
    """The tool's answer to a call, as the text appended after it."""
    try:
        value = format_number(evaluate(expression))
    except CalculatorError as exc:
        value = f"error: {exc}"
    return f"{RESULT_START}{value}{RESULT_END}"


def format_number(value: Fraction) -> str:
    """An integer as such, anything else as a decimal rounded to 6 places."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.6f}".rstrip("0").rstrip(".")


def evaluate(expression: str) -> Fraction:
    """The exact value of an arithmetic expression; raises `CalculatorError` saying why not."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    parser = _Parser(_tokens(expression))
    value = parser.sum()
    if parser.peek() is not None:
        raise CalculatorError(f"unexpected {parser.peek()!r}")
    return value


def _tokens(expression: str) -> list[str]:
    tokens = [number or symbol for number, symbol in _TOKEN.findall(expression.strip())]
    for token in tokens:
        if not (token[0].isdigit() or token in "+-*/()"):
            raise CalculatorError(f"unexpected {token!r}; use numbers, + - * / and parentheses")
    return tokens


class _Parser:
    """sum := product (('+' | '-') product)*; product := unary (('*' | '/') unary)*;
    unary := '-' unary | atom; atom := NUMBER | '(' sum ')'."""

    def __init__(self, tokens: list[str]):
        self.tokens, self.position = tokens, 0

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise CalculatorError("the expression ends too early")
        self.position += 1
        return token

    def sum(self) -> Fraction:
        value = self.product()
        while self.peek() in ("+", "-"):
            value = value + self.product() if self.take() == "+" else value - self.product()
        return value

    def product(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "/"):
            if self.take() == "*":
                value *= self.unary()
            else:
                divisor = self.unary()
                if divisor == 0:
                    raise CalculatorError("division by zero")
                value /= divisor
        return value

    def unary(self) -> Fraction:
        if self.peek() == "-":
            self.take()
            return -self.unary()
        return self.atom()

    def atom(self) -> Fraction:
        token = self.take()
        if token == "(":
            value = self.sum()
            if self.take() != ")":
                raise CalculatorError("missing ')'")
            return value
        if not token[0].isdigit():
            raise CalculatorError(f"unexpected {token!r}")
        return Fraction(token)
