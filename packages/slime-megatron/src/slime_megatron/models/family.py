"""Model families: which Hugging Face architectures the Megatron backend can build.

A family maps one or more Hugging Face ``model_type`` values onto megatron-core's
``GPTModel``: the ``TransformerConfig`` fields its architecture needs, and the weight rules
that convert its checkpoint (see :mod:`slime_megatron.models.weight_map`). slime-megatron
registers qwen2, qwen3, llama and qwen3_moe (see :mod:`slime_megatron.models.families`); a
plugin adds another with :func:`register_family`, e.g. from its plugin module's import or
its ``slime_register_train_backends`` hook, which runs in every process that builds models.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Callable

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


_FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> None:
    """Make ``family`` available for its model types; a type registered twice is an error."""
    for model_type in family.model_types:
        if model_type in _FAMILIES:
            raise ValueError(f"model_type '{model_type}' is registered twice: by family "
                             f"'{_FAMILIES[model_type].name}' and by family '{family.name}'")
    for model_type in family.model_types:
        _FAMILIES[model_type] = family


def model_family(hf_config) -> Family:
    """The family of a Hugging Face config (its ``model_type``), or a clear error."""
    import slime_megatron.models.families  # noqa: F401  (registers the built-in families)

    model_type = getattr(hf_config, "model_type", None)
    if model_type in _FAMILIES:
        return _FAMILIES[model_type]
    close = difflib.get_close_matches(str(model_type), list(_FAMILIES), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise ValueError(
        f"the Megatron backend cannot build model_type '{model_type}'{hint}: supported are "
        f"{', '.join(sorted(_FAMILIES))}; use --train-backend fsdp, or add a family with "
        "slime_megatron.models.register_family"
    )
