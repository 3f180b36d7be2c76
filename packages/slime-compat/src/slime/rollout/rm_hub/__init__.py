"""slime.rollout.rm_hub: scoring with the custom reward function or our registered ones
(`slime_compat.rewards`), and slime's boxed-answer grader `grade_answer_verl` (`math_utils`)."""

from slime.rollout.rm_hub.math_utils import grade_answer_verl
from slime_compat.rewards import async_rm, batched_async_rm

__all__ = ["async_rm", "batched_async_rm", "grade_answer_verl"]
