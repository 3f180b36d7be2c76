"""Group filters for dynamic sampling: which scored groups a rollout keeps.

A group whose rewards are all equal gives every sample the same advantage under group
normalisation, so it carries no learning signal (DAPO's dynamic sampling drops it).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from slime_core.rollout.filters import RolloutProgress
from slime_core.rollout.reward_hub import scalar_reward
from slime_core.sample import Sample, SampleStatus

if TYPE_CHECKING:
    from slime_core.config.config import Config


def _rewards(group: list[Sample], config: Config) -> list[float]:
    key = getattr(config, "reward_key", None)
    return [scalar_reward(s, key) for s in group if s.status is not SampleStatus.FAILED and s.reward is not None]


#: a group whose reward std is at most this carries no signal (THUDM slime's threshold)
MIN_REWARD_STD = 1e-6


def nonzero_std(group: list[Sample], config: Config, progress: RolloutProgress) -> bool:
    """Keep the group only if the sample std of its rewards (Bessel-corrected, computed
    exactly) exceeds ``MIN_REWARD_STD``, as THUDM slime: rewards that differ by rounding noise
    count as equal, and a group of fewer than two rewards is dropped."""
    rewards = _rewards(group, config)
    return len(rewards) >= 2 and statistics.stdev(rewards) > MIN_REWARD_STD


def nonzero_std_unless_scarce(group: list[Sample], config: Config, progress: RolloutProgress) -> bool:
    """Like `nonzero_std`, but keep any group when the groups still in flight could no
    longer fill the batch, so a rollout never starves on an easy (or too hard) dataset."""
    scarce = progress.accepted + progress.in_flight < progress.needed
    return scarce or nonzero_std(group, config, progress)
