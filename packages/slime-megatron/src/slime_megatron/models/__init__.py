"""Hugging Face model families on megatron-core: build a GPTModel, convert its weights.

- :func:`model_family` / :func:`register_family`: which architectures are supported;
- :func:`build_model`: this rank's GPTModel for a Hugging Face config; :func:`provide_model`:
  the same, or ``--megatron-model-provider``'s model, checked against the family's weights;
- :func:`load_hf_weights` / :func:`export_hf_weights`: a rank's shards from Hugging Face
  weights, and gathered Hugging Face tensors back (a collective);
- :func:`hf_to_megatron` / :func:`megatron_to_hf` / :func:`shard_for_rank`: the pure
  conversions on full tensors (HF → Megatron → HF is bit-exact);
- multi-token prediction layers: :mod:`slime_megatron.models.mtp` (checkpoints, weight rules),
  :mod:`.mtp_model` (the GPTModel that keeps them out of the logits), :mod:`.mtp_loss`.
"""

from slime_megatron.models.build import build_model
from slime_megatron.models.family import Family, model_family, register_family
from slime_megatron.models.provider import provide_model
from slime_megatron.models.weight_map import WeightRule
from slime_megatron.models.weights import (
    Ranks,
    export_hf_weights,
    hf_to_megatron,
    load_hf_weights,
    megatron_to_hf,
    shard_for_rank,
    unwrap,
)

__all__ = [
    "Family",
    "Ranks",
    "WeightRule",
    "build_model",
    "export_hf_weights",
    "hf_to_megatron",
    "load_hf_weights",
    "megatron_to_hf",
    "model_family",
    "provide_model",
    "register_family",
    "shard_for_rank",
    "unwrap",
]
