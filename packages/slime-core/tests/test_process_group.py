"""A train rank's default process group."""

import socket

import torch
import torch.distributed as dist

from slime_core.rank.process_group import init_default_group


def test_a_single_rank_forms_its_group_even_where_its_port_is_taken():
    """The port picked for the group may be taken by another process before the group binds
    it (EADDRINUSE in CI); a single rank binds none."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        init_default_group("gloo", "127.0.0.1", taken.getsockname()[1], 0, 1)
        try:
            total = torch.ones(3)
            dist.all_reduce(total)
            assert dist.get_world_size() == 1 and total.tolist() == [1.0, 1.0, 1.0]
        finally:
            dist.destroy_process_group()
