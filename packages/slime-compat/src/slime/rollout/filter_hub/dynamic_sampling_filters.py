"""slime.rollout.filter_hub.dynamic_sampling_filters: keep groups whose rewards differ.

Named on the command line, these select slime-rewards' ``nonzero_std`` filters directly
(`slime_compat.hooks.NATIVE_EQUIVALENTS`); imported, they work on slime's arguments.
"""

from statistics import pstdev

from slime_compat.outputs import DynamicFilterOutput


def check_reward_nonzero_std(args, samples, **kwargs) -> DynamicFilterOutput:
    """Keep the group when its rewards are not all equal (all equal: no learning signal)."""
    rewards = [sample.get_reward_value(args) for sample in samples]
    keep = len(rewards) > 1 and pstdev(rewards) > 0.0
    return DynamicFilterOutput(keep=keep, reason=None if keep else f"zero_std_{round(rewards[0], 1)}")


def check_reward_nonzero_std_with_fallback(args, samples, **kwargs) -> DynamicFilterOutput:
    """`check_reward_nonzero_std`, but a rejected group is kept when too few are left to fill the rollout."""
    output = check_reward_nonzero_std(args, samples, **kwargs)
    output.keep_when_insufficient = True
    return output
