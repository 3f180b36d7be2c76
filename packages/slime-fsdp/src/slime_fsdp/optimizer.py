"""AdamW and its learning-rate schedule (linear warmup, then constant, linear or cosine decay)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from slime_core.rank.step import lr_factor

if TYPE_CHECKING:
    from slime_core.config.config import Config


def build_optimizer(
    model, config: Config, lr: float | None = None
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over the model's trained parameters (not those frozen by name, `slime_core.rank.trainable`)
    with ``lr`` (default ``--lr``), ``--weight-decay``, ``--adam-beta1/2``, and the schedule of `lr_factor`."""
    lr = config.lr if lr is None else lr
    optimizer = torch.optim.AdamW(
        [param for param in model.parameters() if param.requires_grad],
        lr=lr,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
    )
    schedule = lambda step: lr_factor(  # noqa: E731  (LambdaLR wants a callable)
        step, config.lr_warmup_iters, config.lr_decay_style, config.lr_decay_iters, config.min_lr / lr
    )
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
