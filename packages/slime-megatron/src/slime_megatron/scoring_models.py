"""The models a Megatron rank scores samples with beside the policy: the reference policy
(``--use-kl-loss`` / ``--kl-coef``), kept in CPU memory as this rank's parameter shards and
swapped into the policy's model for its pass (`slime_megatron.swap`), and the on-policy
distillation teacher (``--opd-teacher-load``), a second GPTModel of the same parallel layout,
without an optimizer, kept on the device."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from slime_core.checkpoint.directory import is_megatron_checkpoint, megatron_checkpoint, starts_from_ref_load
from slime_megatron import swap
from slime_megatron.chunks import build_chunks
from slime_megatron.layout import check_teacher_vocab

if TYPE_CHECKING:
    from slime_core.config.config import Config


def reference_weights(model, config: Config, hf_config) -> dict[str, torch.Tensor] | None:
    """The reference policy's parameter shards of ``model`` (the policy's chunks, as loaded) on
    CPU: the starting weights, or ``--ref-load`` (a Hugging Face directory, or a Megatron
    checkpoint: `slime_megatron.torch_dist`); None without a KL term."""
    from slime_megatron.models import load_hf_weights
    from slime_megatron.torch_dist import load_weights

    if not (config.use_kl_loss or config.kl_coef):
        return None
    if not config.ref_load or starts_from_ref_load(config):
        return swap.snapshot(model)
    with swap.swapped(model, swap.snapshot(model)):
        if is_megatron_checkpoint(config.ref_load):
            load_weights(megatron_checkpoint(config.ref_load), model)
        else:
            load_hf_weights(model, config.ref_load, hf_config)
        return swap.snapshot(model)


def teacher(config: Config, policy_vocab_size: int):
    """The on-policy distillation teacher (``--opd-teacher-load``) in eval mode, or None."""
    from transformers import AutoConfig

    from slime_megatron.models import load_hf_weights

    if not config.opd_teacher_load:
        return None
    teacher_path = config.opd_teacher_load
    teacher_config = AutoConfig.from_pretrained(teacher_path)
    check_teacher_vocab(policy_vocab_size, teacher_config.vocab_size, teacher_path)
    chunks = build_chunks(teacher_config, config)
    load_hf_weights(chunks, teacher_path, teacher_config)
    for chunk in chunks:
        chunk.config.variable_seq_lengths = chunk.config.virtual_pipeline_model_parallel_size is None
    return chunks.eval()
