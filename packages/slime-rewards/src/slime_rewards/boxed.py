"""``boxed_<type>`` rewards: grade only the last ``\\boxed{...}`` of the response.

`boxed(fn, name)` wraps any reward function: it finds the last complete boxed span and
calls `fn` on a copy of the sample whose response is just that answer, written the way
`fn`'s own extraction expects (``\\boxed{X}`` for math, ``Answer: X`` on one line for dapo,
``</think>\\boxed{X}`` for deepscaler, the bare text otherwise). A response without a
boxed span, or whose last box is cut off (truncated mid-answer), gets the grader's
"no answer" value: 0.0, or dapo's -1 result.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from typing import TYPE_CHECKING

from slime_rewards.math.extract import ends_in_open_box, last_boxed

if TYPE_CHECKING:
    from slime_core.config.config import Config

_REWRITE = {
    "math": "\\boxed{{{}}}",
    "deepscaler": "</think>\\boxed{{{}}}",
    "dapo": "Answer: {}",
}


def boxed(fn, name: str):
    """A reward function that applies `fn` (registered as `name`) to the last boxed span only."""
    template = _REWRITE.get(name, "{}")

    def answer_only(sample):
        response = sample.response or ""
        span = None if ends_in_open_box(response) else last_boxed(response)
        if span is None:
            return None
        if name == "dapo":  # dapo reads one line: a multi-line box (a matrix) must not be cut
            span = " ".join(span.split())
        return with_response(sample, template.format(span))

    def no_answer():
        return {"score": -1.0, "acc": False, "pred": "[INVALID]"} if name == "dapo" else 0.0

    if inspect.iscoroutinefunction(fn):

        async def reward(sample, config: Config | None = None):
            inner = answer_only(sample)
            return no_answer() if inner is None else await fn(inner, config)
    else:

        def reward(sample, config: Config | None = None):
            inner = answer_only(sample)
            return no_answer() if inner is None else fn(inner, config)

    reward.__name__ = reward.__qualname__ = f"boxed_{name}"
    reward.__doc__ = f"The `{name}` reward applied to the last boxed span of the response only."
    return reward


def with_response(sample, response: str):
    """A copy of `sample` with another response (the original is never modified)."""
    if dataclasses.is_dataclass(sample):
        return dataclasses.replace(sample, response=response)
    clone = copy.copy(sample)
    clone.response = response
    return clone
