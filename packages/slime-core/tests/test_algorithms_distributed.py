"""The data-parallel paths (whiten, loss_denominators) on two gloo processes on CPU."""

import torch
import torch.distributed as dist

from slime_core.algorithms import loss_denominators, whiten


def _data():
    torch.manual_seed(0)
    values = torch.randn(5, 6) * 2 + 1
    mask = (torch.rand(5, 6) > 0.3).float()
    return values, mask


def _rank_main(rank: int, world_size: int, port: int):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        values, mask = _data()
        rows = slice(0, 2) if rank == 0 else slice(2, 5)  # uneven shards
        return (
            whiten(values[rows], mask[rows], group=dist.group.WORLD),
            loss_denominators(mask[rows], group=dist.group.WORLD),
        )
    finally:
        dist.destroy_process_group()


def test_whiten_and_denominators_over_ranks_equal_the_concatenated_batch(rank_pool):
    results = rank_pool.run((__file__, "_rank_main"), 2)
    values, mask = _data()
    assert torch.allclose(torch.cat([results[0][0], results[1][0]]), whiten(values, mask), atol=1e-6)
    assert results[0][1] == results[1][1] == loss_denominators(mask)
