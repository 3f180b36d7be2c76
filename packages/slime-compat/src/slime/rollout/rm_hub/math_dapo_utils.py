"""slime.rollout.rm_hub.math_dapo_utils: `compute_score`, DAPO's math grade, on slime-rewards'
DAPO grader (``pip install slime-rewards``)."""

from __future__ import annotations


def compute_score(
    solution_str: str, ground_truth: str, strict_box_verify: bool = False, pause_tokens_index: list[int] | None = None
) -> dict:
    """``{"score": 1.0 | -1.0, "acc", "pred"}`` for the last 300 characters of the solution:
    its ``Answer:`` line, or with ``strict_box_verify`` its last ``\\boxed{}`` (``pause_tokens_index``
    is accepted and not used)."""
    from slime_rewards.dapo import INVALID, dapo_score, normalize_minerva
    from slime_rewards.math.extract import last_boxed

    solution_str = solution_str[-300:]
    if not strict_box_verify:
        return dapo_score(solution_str, ground_truth)
    boxed = last_boxed(solution_str)
    pred = INVALID if boxed is None else normalize_minerva(boxed)
    acc = boxed is not None and pred == normalize_minerva(str(ground_truth))
    return {"score": 1.0 if acc else -1.0, "acc": acc, "pred": pred}
