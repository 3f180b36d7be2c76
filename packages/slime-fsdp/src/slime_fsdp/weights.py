"""Moving weights: export to the rollout engines in buckets, the reference model's weights
kept on CPU and swapped in, and offload / onload for colocated runs."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import torch


def plan_buckets(
    model, bucket_bytes: int, unit: Callable[[str], str] | None = None, only: Callable[[str], bool] | None = None
) -> list[list[str]]:
    """Parameter names (Hugging Face names: FSDP2 keeps them) in consecutive buckets of
    about ``bucket_bytes`` full-size bytes each; a parameter larger than that is alone.
    Parameters with the same ``unit(name)`` (consecutive ones) share a bucket: LoRA's base
    weight and adapter, which are exported merged (`slime_fsdp.lora.export_unit`). With
    ``only``, the parameters it accepts (LoRA's adapter, exported alone)."""
    reshard(model)
    buckets: list[list[str]] = [[]]
    size = 0
    previous = None
    for name, param in model.named_parameters():
        if only is not None and not only(name):
            continue
        nbytes = param.numel() * param.element_size()
        key = unit(name) if unit else name
        if buckets[-1] and size + nbytes > bucket_bytes and key != previous:
            buckets.append([])
            size = 0
        buckets[-1].append(name)
        size += nbytes
        previous = key
    return buckets


def gather_bucket(model, names: list[str], keep: bool) -> list[tuple[str, torch.Tensor]] | None:
    """The full (unsharded) CPU tensors of ``names``; every rank must call this (it
    all-gathers); only a rank with ``keep`` holds on to the result."""
    reshard(model)
    params = dict(model.named_parameters())
    out = []
    for name in names:
        full = _full(params[name].detach())
        if keep:
            out.append((name, full.cpu()))
    return out if keep else None


def _full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def reshard(model) -> None:
    """Put every FSDP module's parameters back in their sharded form (the root keeps its
    parameters gathered after a forward pass), so ``named_parameters`` yields shards."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def snapshot_local_shards(model) -> dict[str, torch.Tensor]:
    """CPU copies of this rank's shard of every parameter."""
    reshard(model)
    return {name: _local(p.detach()).to("cpu", copy=True) for name, p in model.named_parameters()}


def load_local_shards(model, shards: dict[str, torch.Tensor]) -> None:
    """Copy ``shards`` (from `snapshot_local_shards`) into the parameters in place."""
    reshard(model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            _local(p).copy_(shards[name])


@contextmanager
def swapped_weights(model, shards: dict[str, torch.Tensor]):
    """Run the block with ``shards`` (e.g. the reference model's) in place of the current
    weights; the current ones wait in CPU memory and come back afterwards."""
    current = snapshot_local_shards(model)
    load_local_shards(model, shards)
    try:
        yield
    finally:
        load_local_shards(model, current)


def move_optimizer_state(optimizer, device) -> None:
    """Every tensor of the optimizer state to ``device``."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                state[key] = value.to(device)
