"""`RolloutBatch`: the train data of one rollout, and its split across data-parallel ranks.

The driver turns the scored samples of a rollout into one `RolloutBatch` (plain lists, cheap
to send to Ray actors), splits it per data-parallel rank, and every train rank of any
backend receives its share. Groups stay whole on one rank, so group-relative advantages
(GRPO and friends) are computed on the rank with every member of the group at hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from slime_core.reward_hub import scalar_reward
from slime_core.sample import Sample, SampleStatus


@dataclass
class RolloutBatch:
    """Per-sample lists, all of the same length N (the samples of a rollout, or a rank's share)."""

    tokens: list[list[int]] = field(default_factory=list)  # (N,) prompt + response token ids
    response_lengths: list[int] = field(default_factory=list)  # (N,) response tokens at the end of `tokens`
    loss_masks: list[list[int]] = field(default_factory=list)  # (N,) (response_len,) 1 = trained on
    rewards: list[float] = field(default_factory=list)  # (N,) scalar reward (after --reward-key)
    group_ids: list[int] = field(default_factory=list)  # (N,) samples of one prompt share an id
    rollout_log_probs: list[list[float]] = field(default_factory=list)  # (N,) (response_len,) engine log-probs
    values: list[list[float]] | None = None  # (N,) (response_len,) critic values V_old (PPO), else None

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def from_samples(cls, samples: list[Sample], reward_key: str | None = None) -> RolloutBatch:
        """The trainable samples (not failed, not aborted) of a rollout, in order."""
        batch = cls()
        for sample in samples:
            if sample.status in (SampleStatus.FAILED, SampleStatus.ABORTED):
                continue
            sample.check()
            batch.tokens.append(list(sample.tokens))
            batch.response_lengths.append(sample.response_length)
            batch.loss_masks.append(list(sample.loss_mask))
            batch.rewards.append(scalar_reward(sample, reward_key))
            batch.group_ids.append(sample.group_index)
            batch.rollout_log_probs.append(list(sample.rollout_log_probs))
        return batch

    def select(self, indices: list[int]) -> RolloutBatch:
        """The samples at ``indices``, in that order."""
        picked = {}
        for f in fields(self):
            column = getattr(self, f.name)
            picked[f.name] = None if column is None else [column[i] for i in indices]
        return RolloutBatch(**picked)

    def num_tokens(self, index: int) -> int:
        return len(self.tokens[index])


def split_by_dp_rank(batch: RolloutBatch, dp_size: int) -> list[RolloutBatch]:
    """One share per data-parallel rank (see `dp_rank_indices`)."""
    return [batch.select(indices) for indices in dp_rank_indices(batch, dp_size)]


def dp_rank_indices(batch: RolloutBatch, dp_size: int) -> list[list[int]]:
    """The sample indices of each data-parallel rank: whole groups, balanced by token count.

    Groups go, largest first, to the rank with the fewest tokens so far (the greedy LPT
    rule: within 4/3 of the best balance). Every rank needs at least one group.
    """
    groups: dict[int, list[int]] = {}
    for i, group_id in enumerate(batch.group_ids):
        groups.setdefault(group_id, []).append(i)
    if len(groups) < dp_size:
        raise ValueError(
            f"{len(groups)} prompt groups cannot feed {dp_size} data-parallel ranks (a group stays on one rank); "
            "raise --rollout-batch-size or use fewer training ranks"
        )
    loads, shares = [0] * dp_size, [[] for _ in range(dp_size)]
    by_size = sorted(groups.values(), key=lambda idx: -sum(batch.num_tokens(i) for i in idx))
    for indices in by_size:
        rank = loads.index(min(loads))
        shares[rank].extend(indices)
        loads[rank] += sum(batch.num_tokens(i) for i in indices)
    return [sorted(share) for share in shares]
