"""Running one function as a group of Megatron ranks in fresh processes (``slime convert``,
tests): ``run_on_ranks(fn, world_size, sizes, *args)`` calls ``fn(rank, sizes, *args)`` on
each rank, joined by gloo (nccl for CUDA tensors), with Megatron's parallel groups for
``sizes`` (an object with the Megatron options, see ``slime_megatron.parallel``).

The ranks are spawned by `slime_core.rank.processes.spawn_ranks` (never forked; a test's
function is given as ``(path of its file, function name)``).
"""

from __future__ import annotations

from typing import Any

from slime_core.cluster.network import LOOPBACK
from slime_core.rank.processes import RankPool, Target, resolve, spawn_ranks


def run_on_ranks(target: Target, world_size: int, sizes, *args, pool: RankPool | None = None) -> list[Any]:
    """Each rank's return value, in rank order (one rank runs in this process); ``pool``: run
    them on its processes (a test session's) instead of new ones."""
    return (pool.run if pool else spawn_ranks)(_megatron_rank, world_size, target, sizes, *args)


def _megatron_rank(rank: int, world_size: int, port: int, target: Target, sizes, *args) -> Any:
    from slime_megatron.parallel import destroy_parallel, init_parallel

    fn = resolve(target)
    init_parallel(sizes, rank, world_size, LOOPBACK, port)  # spawned on this machine
    try:
        return fn(rank, sizes, *args)
    finally:
        destroy_parallel()
