"""slime.rollout.rm_hub.math_utils: `extract_answer` (the last ``\\boxed{}``) and
`grade_answer_verl` (a boxed answer against the label), on slime-rewards' math grader
(``pip install slime-rewards``)."""

from __future__ import annotations

__all__ = ["extract_answer", "grade_answer_verl"]


def extract_answer(passage: str) -> str | None:
    """The content of the passage's last ``\\boxed{...}``, or None when it has none."""
    from slime_rewards.math import last_boxed

    return last_boxed(passage) if "\\boxed" in passage else None


def grade_answer_verl(solution_str: str, ground_truth) -> bool:
    """Whether the solution's last boxed answer equals the ground truth (itself unboxed when
    boxed); no boxed answer, or no ground truth, is wrong."""
    from slime_rewards.math import answers_match

    if not ground_truth:
        return False
    ground_truth = str(ground_truth)
    if "\\boxed" in ground_truth:
        ground_truth = extract_answer(ground_truth) or ""
    given = extract_answer(solution_str)
    return given is not None and answers_match(given, ground_truth)
