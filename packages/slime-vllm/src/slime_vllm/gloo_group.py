"""The gloo group of the ``broadcast`` weight transport on CPU, on both of its sides.

vLLM's own weight-transfer backends are all CUDA's, so slime forms a group of its own: the
sender (the run's driver) is rank 0, engine ``i``'s worker rank ``1 + i``. The sender hosts
a TCP store at ``host:port``; each side makes its gloo group on that store, bound to its own
address (``local_host``). Imported by the driver (`slime_vllm.engines`) and inside vLLM's
workers (`slime_vllm.worker_extension`), so it imports torch alone.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

#: Keys of the group's store live under this prefix.
PREFIX = "slime-vllm-weights"


class Group:
    """A joined group and its store, which must outlive it (rank 0 serves it)."""

    def __init__(self, group: dist.ProcessGroupGloo, store: dist.TCPStore):
        self.group, self.store = group, store


def join(host: str, port: int, rank: int, world_size: int, local_host: str, timeout_s: float) -> Group:
    """Join (rank 0: host) the group; blocks until every rank has joined, at most ``timeout_s``."""
    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout, wait_for_workers=False)
    options = dist.ProcessGroupGloo._Options()
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=local_host)]
    options._timeout = timeout
    return Group(dist.ProcessGroupGloo(dist.PrefixStore(PREFIX, store), rank, world_size, options), store)


def send(group: Group, tensors: list[torch.Tensor]) -> None:
    """Broadcast ``tensors`` from rank 0, in order."""
    for tensor in tensors:
        group.group.broadcast([tensor.contiguous()], _from_rank_0()).wait()


def receive(group: Group, dtypes: list[str], shapes: list[list[int]]) -> list[torch.Tensor]:
    """The tensors rank 0 broadcasts, of the announced dtypes (torch's names) and shapes, in order."""
    received = []
    for dtype, shape in zip(dtypes, shapes):
        tensor = torch.empty(shape, dtype=getattr(torch, dtype))
        group.group.broadcast([tensor], _from_rank_0()).wait()
        received.append(tensor)
    return received


def _from_rank_0() -> dist.BroadcastOptions:
    options = dist.BroadcastOptions()
    options.rootRank = 0
    return options
