"""slime.rollout.on_policy_distillation: on-policy distillation is native here.

The module imports so code that names it loads; the teacher's log-probs and the KL penalty
toward them come from ``--opd-teacher-load TEACHER_DIR --opd-kl-coef C``, and naming these
functions with ``--custom-rm-path`` / ``--custom-reward-post-process-path`` is a config error
that says so.
"""

from slime_compat.hooks import NATIVE_INSTEAD

__all__ = ["post_process_rewards", "reward_func"]


async def reward_func(args, sample, **kwargs):
    """Not run here: raises with the native way."""
    raise RuntimeError(NATIVE_INSTEAD["custom_rm_path", f"{__name__}.reward_func"])


def post_process_rewards(args, samples, **kwargs):
    """Not run here: raises with the native way."""
    raise RuntimeError(NATIVE_INSTEAD["custom_reward_post_process_path", f"{__name__}.post_process_rewards"])
