"""DeepScaleR's reward: grade only what the model says after its reasoning.

The response must close its reasoning with ``</think>``; the text after the last
``</think>`` is graded with the math grader (boxed answer first, then answer phrases).
No ``</think>`` means the model never finished thinking: reward 0, whatever the text
contains, so a correct number inside unfinished reasoning earns nothing.
"""

from __future__ import annotations

from slime_rewards.math.extract import THINK_END
from slime_rewards.math.grader import DEFAULT_TIMEOUT, grade_math


def deepscaler_score(response: str, label, timeout: float = DEFAULT_TIMEOUT) -> float:
    """1.0 if the text after the last ``</think>`` answers `label` correctly, else 0.0."""
    if THINK_END not in (response or ""):
        return 0.0
    final = response.rsplit(THINK_END, 1)[1]
    return 1.0 if grade_math(final, label, timeout) else 0.0
