"""Swapping another set of weights (the reference policy's) into a model for a while.

The swapped-out weights wait in CPU memory as this rank's shards, so the device never holds
two copies of the model; the parameter tensors are refilled in place, so Megatron's DDP
buffers and the optimizer keep pointing at them.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch


def snapshot(model) -> dict[str, torch.Tensor]:
    """CPU copies of this rank's parameter shards, by name."""
    return {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters()}


def load(model, weights: dict[str, torch.Tensor]) -> None:
    """Copy ``weights`` (from `snapshot`) into the parameters in place."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(weights[name])


@contextmanager
def swapped(model, weights: dict[str, torch.Tensor]):
    """Run the block with ``weights`` in place of the current ones, which come back after."""
    current = snapshot(model)
    load(model, weights)
    try:
        yield
    finally:
        load(model, current)
