"""The tool-use example's reward: 1 when the final answer (the text after the last tool
result) equals the label, else 0. Select it with
``--rm-type examples.tool_use.reward:final_answer_reward``."""

from __future__ import annotations

from examples.tool_use.calculator import RESULT_END


def final_answer(response: str) -> str:
    """What the model answered after its last tool result (the whole response without one)."""
    return response.rpartition(RESULT_END)[2].strip()


def final_answer_reward(sample, config) -> float:
    return float(final_answer(sample.response) == str(sample.label).strip())
