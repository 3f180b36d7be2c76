"""The default ``torch.distributed`` group of a train rank, as both train backends form it."""

from __future__ import annotations


def init_default_group(backend: str, master_addr: str, master_port: int, rank: int, world_size: int) -> None:
    """A TCP rendezvous at ``master_addr:master_port`` for several ranks. A single rank needs
    none and gets an in-memory store: binding the chosen port raced with every other process
    on the machine (a port free when it was picked could be taken before the store bound it,
    and the rank failed with EADDRINUSE)."""
    import torch.distributed as dist

    if world_size == 1:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    else:
        dist.init_process_group(backend, init_method=f"tcp://{master_addr}:{master_port}", rank=rank,
                                world_size=world_size)
