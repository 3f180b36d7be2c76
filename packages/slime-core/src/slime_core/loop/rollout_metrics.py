"""Metrics of a rollout's accepted groups, and the staleness bound of asynchronous mode."""

from __future__ import annotations

import statistics

from slime_core.reward_hub import scalar_reward
from slime_core.sample import Sample


def rollout_metrics(groups: list[list[Sample]], reward_key: str | None) -> dict[str, float]:
    """Reward mean / std, the share of groups whose rewards are all equal (no GRPO signal),
    response lengths and the share of samples cut at the length limit."""
    samples = [sample for group in groups for sample in group]
    if not samples:
        return {"rollout/samples": 0.0}
    rewards = [scalar_reward(sample, reward_key) for sample in samples]
    lengths = [sample.response_length for sample in samples]
    flat = sum(len({scalar_reward(s, reward_key) for s in group}) == 1 for group in groups)
    return {
        "rollout/samples": float(len(samples)),
        "rollout/reward_mean": statistics.fmean(rewards),
        "rollout/reward_std": statistics.pstdev(rewards),
        "rollout/zero_std_group_fraction": flat / len(groups),
        "rollout/response_length_mean": statistics.fmean(lengths),
        "rollout/response_length_max": float(max(lengths)),
        "rollout/truncated_fraction": sum(s.status == "truncated" for s in samples) / len(samples),
    }


def drop_stale_groups(groups: list[list[Sample]], version: int, max_staleness: int | None) -> tuple[list[list[Sample]], int]:
    """The groups none of whose tokens came from weights more than ``max_staleness``
    versions older than ``version`` (the trainer's), and how many were dropped."""
    if max_staleness is None:
        return groups, 0
    kept = [group for group in groups if staleness(group, version) <= max_staleness]
    return kept, len(groups) - len(kept)


def staleness(group: list[Sample], version: int) -> int:
    """How many weight versions behind ``version`` the oldest token of the group is."""
    versions = [v for sample in group for v in sample.weight_versions]
    return version - min(versions) if versions else 0
