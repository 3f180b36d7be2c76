"""A data-parallel replica's samples, from the per-rank shares `TrainGroup` hands out.

`slime_core.train_backend.TrainGroup` splits each rollout per data-parallel rank: the rank's
``init()`` answers its ``data_parallel_rank``, and the first rank of each replica is handed the
replica's whole prompt groups, its other ranks (tensor, pipeline and context-parallel) none. All
of them must run the same samples, so every rank gathers the shares of its replica group: the
replica trains on their union, in group-rank order, and each rank answers per-sample questions
for its own share only. Without model parallelism the group is one rank and nothing moves.
"""

from __future__ import annotations

from dataclasses import fields

import torch.distributed as dist

from slime_core.rollout_batch import RolloutBatch


def gather_shares(share: RolloutBatch, group) -> tuple[RolloutBatch, list[int]]:
    """The union of the shares of ``group``'s ranks, and the indices of ``share`` in it."""
    size = dist.get_world_size(group)
    if size == 1:
        return share, list(range(len(share)))
    parts: list[RolloutBatch | None] = [None] * size
    dist.all_gather_object(parts, share, group=group)
    offset = sum(len(part) for part in parts[: dist.get_rank(group)])
    return concat(parts), list(range(offset, offset + len(share)))


def concat(parts: list[RolloutBatch]) -> RolloutBatch:
    """The samples of ``parts``, one after the other."""
    merged = {}
    for f in fields(RolloutBatch):
        columns = [getattr(part, f.name) for part in parts]
        merged[f.name] = None if any(c is None for c in columns) else [x for c in columns for x in c]
    return RolloutBatch(**merged)
