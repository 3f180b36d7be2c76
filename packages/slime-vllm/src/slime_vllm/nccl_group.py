"""The NCCL group of the ``broadcast`` weight transport on GPUs, on both of its sides (not yet run on a GPU).

It is vLLM's NCCL weight-transfer backend's group (``vllm.distributed.weight_transfer.nccl_common``):
the sender (the run's driver) opens it as rank 0 with the backend's ``trainer_init``, engine ``i``'s
worker joins as rank ``1 + i`` with its ``stateless_init_process_group`` on the worker's GPU; both
meet on the TCP store vLLM's ``StatelessProcessGroup`` hosts at ``host:port``. The tensors go by
vLLM's ``PyNcclCommunicator.broadcast``; the worker loads them through slime's staging
(`slime_vllm.worker_extension`), which reloads whole layers, rather than the backend's own
``receive_weights``, which reloads a layer with whatever one bucket brought. Same calls as
`slime_vllm.gloo_group` (the CPU transport); the sender needs vLLM importable in the driver's
interpreter (`sender_available`).
"""

from __future__ import annotations

from typing import Any

import torch


def sender_available() -> bool:
    """Whether this interpreter can open the sender's end: CUDA, and vLLM importable."""
    if not torch.cuda.is_available():
        return False
    try:
        import vllm.distributed.weight_transfer.nccl_common  # noqa: F401
    except ImportError:
        return False
    return True


def join(host: str, port: int, rank: int, world_size: int, local_host: str, timeout_s: float) -> Any:
    """Join (rank 0: open, hosting the store) the group; blocks until every rank has joined.
    ``local_host`` and ``timeout_s`` are `slime_vllm.gloo_group.join`'s, unused here: NCCL picks
    its own interface, and vLLM's store waits with its own timeout."""
    from vllm.distributed.weight_transfer import nccl_common

    if rank == 0:
        return nccl_common.trainer_init({"master_address": host, "master_port": port, "world_size": world_size})
    device = torch.accelerator.current_device_index()
    return nccl_common.stateless_init_process_group(host, port, rank, world_size, device)


def send(group: Any, tensors: list[torch.Tensor]) -> None:
    """Broadcast ``tensors`` from rank 0, in order (copied to this process's GPU first)."""
    stream = torch.cuda.current_stream()
    for tensor in tensors:
        group.broadcast(tensor.to("cuda", non_blocking=True).contiguous(), src=0, stream=stream)
    stream.synchronize()


def receive(group: Any, dtypes: list[str], shapes: list[list[int]]) -> list[torch.Tensor]:
    """The tensors rank 0 broadcasts, of the announced dtypes (torch's names) and shapes, in order, on this GPU."""
    stream = torch.cuda.current_stream()
    received = []
    for dtype, shape in zip(dtypes, shapes):
        tensor = torch.empty(shape, dtype=getattr(torch, dtype), device="cuda")
        group.broadcast(tensor, src=0, stream=stream)
        received.append(tensor)
    stream.synchronize()
    return received
