"""Which of a Megatron model's parameters train: the multi-token prediction layers, and the
name patterns of ``--only-train-params-name-list`` / ``--freeze-params-name-list``
(`slime_core.rank.trainable`) as megatron-core's checkpoints can save them."""

from __future__ import annotations

import re


def train_mtp_or_freeze(model, train: bool) -> None:
    """A model's multi-token prediction layers are trained with ``train`` (the MTP loss,
    `slime_megatron.models.mtp_loss`); otherwise frozen, so that neither DDP nor the optimizer
    (its weight decay) touches them and checkpoints keep them as loaded."""
    if not getattr(model, "mtp_process", False):
        return
    model.train_mtp = train
    for param in model.mtp.parameters():
        param.requires_grad_(train)


def check_layers_frozen_alike(named_parameters) -> None:
    """megatron-core checkpoints a parameter of every decoder layer as one tensor, and its
    optimizer state too, which a layer frozen by name does not have: refuse patterns that freeze
    a parameter in some layers and train it in others before the first save fails."""
    trained: dict[str, set[bool]] = {}
    for name, param in named_parameters:
        trained.setdefault(re.sub(r"layers\.\d+\.", "layers.*.", name), set()).add(param.requires_grad)
    mixed = sorted(name for name, states in trained.items() if len(states) > 1)
    if mixed:
        raise ValueError(
            f"--only-train-params-name-list / --freeze-params-name-list freeze {mixed[0]} in some layers and not in "
            "others, which megatron-core's checkpoints (one tensor over the layers) cannot save with --save: "
            "freeze a parameter in every layer or in none (or use --train-backend fsdp)"
        )
