"""Offload and onload of a Megatron rank's training state, for colocated runs.

While offloaded, every parameter's ``.data`` is a CPU copy (pinned on CUDA), so the weights
can still be read: the loop pushes them to the engines after offloading. The device tensor
each parameter had (a view into Megatron's DDP parameter buffer with the distributed
optimizer, else its own) is kept as an object, its storage freed by resizing it to zero
bytes; onload reallocates the storage, copies the values back and points the parameter at
it again, so the DDP buffers and the optimizer keep referring to the same tensors. Gradient
buffers are freed and come back zeroed (they are empty between optimizer steps). The
optimizer's own tensors (float32 main parameters of bf16 training or of the distributed
optimizer, Adam's moments) move to the CPU and back.

The same code runs on CPU-only machines, where the "device" storage is freed and refilled
too, so tests exercise the round trip.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Offloaded:
    """What `offload` moved away, for `onload` to bring back."""

    params: list[tuple[torch.nn.Parameter, torch.Tensor, int]] = field(
        default_factory=list
    )  # (param, device tensor, storage bytes)
    grad_bytes: list[int] = field(default_factory=list)  # storage size of each gradient buffer


def offload(model, optimizer) -> Offloaded:
    """Move ``model``'s (`ModelChunks` in Megatron DDP) parameters and gradients and
    ``optimizer``'s tensors to CPU memory."""
    params = list(model.parameters())
    _move_optimizer(optimizer, torch.device("cpu"), skip={id(p) for p in params})
    saved = Offloaded()
    for param in params:
        device_tensor = param.data
        copy = device_tensor.to("cpu", copy=True)
        param.data = copy.pin_memory() if device_tensor.is_cuda else copy
        saved.params.append((param, device_tensor, device_tensor.untyped_storage().nbytes()))
    for _, device_tensor, _ in saved.params:  # after every copy: parameters may share a buffer's storage
        device_tensor.untyped_storage().resize_(0)
    for buffer in _buffers(model):
        saved.grad_bytes.append(buffer.grad_data.untyped_storage().nbytes())
        buffer.grad_data.untyped_storage().resize_(0)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return saved


def onload(model, optimizer, saved: Offloaded, device: torch.device) -> None:
    """Undo `offload`: storage reallocated on ``device``, refilled, and the parameters
    pointed at it again; optimizer tensors moved back."""
    with torch.no_grad():
        for param, device_tensor, nbytes in saved.params:
            if device_tensor.untyped_storage().nbytes() == 0:
                device_tensor.untyped_storage().resize_(nbytes)
            device_tensor.copy_(param.data)
            param.data = device_tensor
    for buffer, grad_bytes in zip(_buffers(model), saved.grad_bytes):
        buffer.grad_data.untyped_storage().resize_(grad_bytes)
        buffer.grad_data.zero_()
    _move_optimizer(optimizer, device, skip={id(p) for p in model.parameters()})


def _buffers(model) -> list:
    """The DDP gradient buffers of every model chunk."""
    return [buffer for chunk in model for buffer in [*chunk.buffers, *chunk.expert_parallel_buffers]]


def _move_optimizer(optimizer, device: torch.device, skip: set[int]) -> None:
    """Every tensor of the inner torch optimizers to ``device``, except the model's own
    parameters (ids in ``skip``), which move with the model."""
    for inner in _torch_optimizers(optimizer):
        for group in inner.param_groups:
            for param in group["params"]:
                if id(param) not in skip:
                    param.data = param.data.to(device)
        for state in inner.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    state[key] = value.to(device)


def _torch_optimizers(optimizer) -> list[torch.optim.Optimizer]:
    """The torch optimizers inside a Megatron (possibly chained) optimizer."""
    chained = getattr(optimizer, "chained_optimizers", [optimizer])
    return [inner.optimizer for inner in chained if getattr(inner, "optimizer", None) is not None]
