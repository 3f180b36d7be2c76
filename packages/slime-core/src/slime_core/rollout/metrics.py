"""Metrics of a rollout's accepted groups, and the staleness bound of asynchronous mode."""

from __future__ import annotations

import statistics

from slime_core.rollout.reward_hub import scalar_reward
from slime_core.rollout_batch import RolloutBatch
from slime_core.sample import Sample


def rollout_metrics(
    groups: list[list[Sample]],
    reward_key: str | None,
    batch: RolloutBatch | None = None,
    category_key: str | None = None,
) -> dict[str, float]:
    """Reward mean / std, the share of groups whose rewards are all equal (no GRPO signal),
    response lengths, the share of samples cut at the length limit and, with ``category_key``
    (``--log-reward-category``), each reward category's share (`category_shares`). With a ``batch``
    whose rewards were post-processed (``raw_rewards`` set), the reward statistics are those
    of its raw rewards, and ``rollout/post_processed_reward_mean`` is the mean trained on."""
    samples = [sample for group in groups for sample in group]
    if not samples:
        return {"rollout/samples": 0.0}
    lengths = [sample.response_length for sample in samples]
    if batch is not None and batch.raw_rewards:
        rewards = {
            **reward_metrics(batch.raw_rewards, batch.group_ids),
            "rollout/post_processed_reward_mean": statistics.fmean(batch.rewards),
        }
    else:
        rewards = reward_metrics([scalar_reward(s, reward_key) for s in samples], [s.group_index for s in samples])
    return {
        "rollout/samples": float(len(samples)),
        **rewards,
        "rollout/response_length_mean": statistics.fmean(lengths),
        "rollout/response_length_max": float(max(lengths)),
        "rollout/truncated_fraction": sum(s.status == "truncated" for s in samples) / len(samples),
        **(category_shares(samples, category_key, "rollout/error_cat/") if category_key else {}),
    }


def category_shares(samples: list[Sample], key: str, prefix: str) -> dict[str, float]:
    """``{prefix}<category>``: the share of ``samples`` whose dict reward holds that category under
    ``key`` (``--log-reward-category``, as slime logs it); a reward without it counts as ``None``."""
    counts: dict[str, int] = {}
    for sample in samples:
        category = str(sample.reward.get(key)) if isinstance(sample.reward, dict) else "None"
        counts[category] = counts.get(category, 0) + 1
    return {f"{prefix}{category}": count / len(samples) for category, count in counts.items()} if samples else {}


def reward_metrics(rewards: list[float], group_ids: list[int]) -> dict[str, float]:
    """Mean and population std of ``rewards``, and the share of groups (samples with equal
    ``group_ids``) whose rewards are all equal."""
    by_group: dict[int, set[float]] = {}
    for reward, group in zip(rewards, group_ids):
        by_group.setdefault(group, set()).add(reward)
    return {
        "rollout/reward_mean": statistics.fmean(rewards),
        "rollout/reward_std": statistics.pstdev(rewards),
        "rollout/zero_std_group_fraction": sum(len(values) == 1 for values in by_group.values()) / len(by_group),
    }


def drop_stale_groups(
    groups: list[list[Sample]], version: int, max_staleness: int | None
) -> tuple[list[list[Sample]], int]:
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
