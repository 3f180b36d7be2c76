"""Model families: which Hugging Face architectures the Megatron backend can build.

A family maps one or more Hugging Face ``model_type`` values onto megatron-core's
``GPTModel``: the ``TransformerConfig`` fields its architecture needs, and the weight rules
that convert its checkpoint (see :mod:`slime_megatron.models.weight_map`). slime-megatron
registers qwen2, qwen3, llama, qwen3_moe (:mod:`slime_megatron.models.families`), glm4_moe,
deepseek_v3 (:mod:`slime_megatron.models.deepseek`) and glm4 (:mod:`slime_megatron.models.glm4`);
the architectures megatron-core cannot
build are in `MISSING`, each with what megatron-core lacks for it. A plugin adds a family with
:func:`register_family`, e.g. from its plugin module's import or its
``slime_register_train_backends`` hook, which runs in every process that builds models.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field

from slime_megatron.models.weight_map import WeightRule


@dataclass(frozen=True)
class Family:
    """How a Hugging Face architecture becomes a megatron-core GPTModel."""

    name: str
    model_types: tuple[str, ...]  # Hugging Face config.model_type values it covers
    # hf_config -> TransformerConfig fields this architecture sets (qk norm, qkv bias, MoE, ...)
    transformer_config: Callable[[object], dict]
    # hf_config -> every parameter of the full model, with global layer and expert indices
    weight_rules: Callable[[object], list[WeightRule]]
    # hf_config -> extra GPTModel keyword arguments (rope scaling, ...)
    model_kwargs: Callable[[object], dict] = field(default=lambda hf_config: {})
    # megatron's local decoder block spec -> the one this architecture needs (modules of ours)
    layer_spec: Callable[[object], object] = field(default=lambda spec: spec)
    # (hf_config, i) -> the rules of decoder layer i (``decoder.layers.{i}.`` names), for the
    # decoder layer of a multi-token prediction layer (`slime_megatron.models.mtp`); None: the
    # architecture has no MTP layers
    mtp_layer: Callable[[object, int], list[WeightRule]] | None = None


_FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> None:
    """Make ``family`` available for its model types; a type registered twice is an error."""
    for model_type in family.model_types:
        if model_type in _FAMILIES:
            raise ValueError(
                f"model_type '{model_type}' is registered twice: by family "
                f"'{_FAMILIES[model_type].name}' and by family '{family.name}'"
            )
    for model_type in family.model_types:
        _FAMILIES[model_type] = family


#: Hugging Face model types the FSDP backend trains and megatron-core cannot build, with what it lacks.
MISSING = {
    "qwen3_next": "megatron-core has no gated delta-net (linear attention) layer that runs without "
    "flash-linear-attention "
    "(its experimental GatedDeltaNet, experimental_attention_variant 'gated_delta_net', needs that "
    "Triton/CUDA package), and slime-megatron maps no Qwen3-Next checkpoint onto it yet",
    "glm_moe_dsa": "megatron-core 0.16's sparse attention (experimental_attention_variant 'dsa') is DeepSeek-V3.2's, "
    "not GLM-5's: its indexer always applies a Hadamard rotation (bf16 only, fast_hadamard_transform) "
    "that GLM-5's indexer does not, and no layer can reuse the previous layer's top-k (GLM-5's "
    "'shared' indexer layers)",
}


def model_family(hf_config) -> Family:
    """The family of a Hugging Face config (its ``model_type``), or a clear error."""
    model_type = getattr(hf_config, "model_type", None)
    family = _registered().get(model_type)
    if family is None:
        raise ValueError(unsupported_reason(model_type))
    return family


def unsupported_reason(model_type) -> str | None:
    """Why the Megatron backend cannot build ``model_type`` and what to do instead; None if it can."""
    families = _registered()
    if model_type in families:
        return None
    if model_type in MISSING:
        return (
            f"the Megatron backend cannot build model_type '{model_type}': {MISSING[model_type]}; "
            "use --train-backend fsdp, which trains it"
        )
    close = difflib.get_close_matches(str(model_type), list(families), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return (
        f"the Megatron backend cannot build model_type '{model_type}'{hint}: supported are "
        f"{', '.join(sorted(families))}; use --train-backend fsdp, or add a family with "
        "slime_megatron.models.register_family"
    )


def num_routed_experts(hf_config) -> int:
    """The routed experts of a MoE config (Qwen: ``num_experts``; DeepSeek, GLM: ``n_routed_experts``)."""
    return getattr(hf_config, "num_experts", None) or hf_config.n_routed_experts


def _registered() -> dict[str, Family]:
    import slime_megatron.models.deepseek  # noqa: F401  (registers the built-in families)
    import slime_megatron.models.families  # noqa: F401
    import slime_megatron.models.glm4  # noqa: F401

    return _FAMILIES
