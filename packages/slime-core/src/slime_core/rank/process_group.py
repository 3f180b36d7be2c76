"""The default ``torch.distributed`` group of a train rank, as both train backends form it.

Where its store lives: a run's train ranks (`slime_core.train_backend.TrainGroup`) join a store
that the driver serves (`serve_store`) on a port the kernel picks as the store binds it, so no
other process can take that port between its pick and its bind; the driver marks their
environment with `SERVED_STORE_ENV`. Elsewhere (``spawn_ranks``, tests) rank 0 serves the
store on the port it is given, as torch's ``tcp://`` rendezvous does.
"""

from __future__ import annotations

import os

#: Set in the environment of ranks whose store the driver serves (`serve_store`).
SERVED_STORE_ENV = "SLIME_SERVED_STORE"


def serve_store(host: str):
    """A rendezvous store served from this process on ``host`` and a port the kernel picks
    as it binds: ``(store, port)``. Keep the store as long as the ranks' group lives."""
    import torch.distributed as dist

    store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False)
    return store, store.port


def init_default_group(
    backend: str, master_addr: str, master_port: int, rank: int, world_size: int, timeout_minutes: float | None = None
) -> None:
    """A TCP rendezvous at ``master_addr:master_port`` for several ranks: a store the driver
    serves (with `SERVED_STORE_ENV` set), else one that rank 0 serves. A single rank needs
    none and gets an in-memory store: binding the chosen port raced with every other process
    on the machine (a port free when it was picked could be taken before the store bound it,
    and the rank failed with EADDRINUSE). ``timeout_minutes`` (``--distributed-timeout-minutes``;
    torch's default without it) bounds every collective: a peer that hangs makes the others fail."""
    from datetime import timedelta

    import torch.distributed as dist
    from torch.distributed.constants import default_pg_timeout

    timeout = default_pg_timeout if timeout_minutes is None else timedelta(minutes=timeout_minutes)
    if world_size == 1:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    elif os.environ.get(SERVED_STORE_ENV):
        store = dist.TCPStore(master_addr, master_port, is_master=False, timeout=timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
    else:
        dist.init_process_group(
            backend, init_method=f"tcp://{master_addr}:{master_port}", rank=rank, world_size=world_size, timeout=timeout
        )
