"""AdamW and its learning-rate schedule (linear warmup, then constant, linear or cosine decay)."""

from __future__ import annotations

import math

import torch


def build_optimizer(model, config, lr: float | None = None) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over the model's parameters with ``lr`` (default ``--lr``), ``--weight-decay``,
    ``--adam-beta1/2``, and the schedule of `lr_factor`."""
    lr = config.lr if lr is None else lr
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=lr,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
    )
    schedule = lambda step: lr_factor(  # noqa: E731  (LambdaLR wants a callable)
        step, config.lr_warmup_iters, config.lr_decay_style, config.lr_decay_iters, config.min_lr / lr
    )
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


def lr_factor(step: int, warmup: int, style: str, decay_iters: int | None, min_ratio: float) -> float:
    """The multiple of ``--lr`` at optimizer step ``step``.

    Warmup: (step + 1) / warmup for the first ``warmup`` steps. Then ``constant``: 1;
    ``linear``/``cosine``: from 1 down to ``min_ratio`` over ``decay_iters`` steps, then
    ``min_ratio``.
    """
    if step < warmup:
        return (step + 1) / warmup
    if style == "constant" or not decay_iters:
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, decay_iters - warmup))
    if style == "linear":
        shape = 1.0 - progress
    elif style == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise ValueError(f"unknown --lr-decay-style {style!r}; use constant, linear or cosine")
    return min_ratio + (1.0 - min_ratio) * shape
