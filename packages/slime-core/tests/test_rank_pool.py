"""`RankPool`: the same processes serve one call after another; a rank's error or death is
raised here, naming the rank, and the next call starts fresh processes."""

import os

import pytest

from slime_core.rank.processes import RankPool


def _pid_and_sum(rank: int, world_size: int, port: int, value: int):
    return os.getpid(), rank + world_size + value


def _rank_1_raises(rank: int, world_size: int, port: int):
    if rank == 1:
        raise ValueError("bad shard")
    return rank


def _rank_0_dies(rank: int, world_size: int, port: int):
    if rank == 0:
        os._exit(3)
    return rank


def test_a_pool_reuses_its_processes_and_raises_what_a_rank_hit():
    pool = RankPool()
    try:
        first = pool.run((__file__, "_pid_and_sum"), 2, 10)
        second = pool.run((__file__, "_pid_and_sum"), 2, 20)
        assert [total for _, total in first] == [12, 13] and [total for _, total in second] == [22, 23]
        assert [pid for pid, _ in first] == [pid for pid, _ in second] and first[0][0] != os.getpid()
        with pytest.raises(RuntimeError, match=r"rank 1 failed:(.|\n)*ValueError: bad shard"):
            pool.run((__file__, "_rank_1_raises"), 2)
        with pytest.raises(RuntimeError, match=r"rank 0 died \(exit code 3\)"):
            pool.run((__file__, "_rank_0_dies"), 2)  # on new processes: the error stopped the others
        assert pool.run((__file__, "_pid_and_sum"), 1, 0) == [(os.getpid(), 1)]  # one rank: here
    finally:
        pool.close()
