"""megatron-core's ``TransformerConfig`` from a Hugging Face config and slime's options.

Layered, later wins: what every supported decoder shares (RMSNorm, SwiGLU, RoPE, no
dropout), what the model's family adds (qk norm, qkv bias, MoE), the Megatron options
(parallel sizes, recomputation, precision), and last ``--megatron-config KEY=VALUE``.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing

import torch


class MegatronConfigError(ValueError):
    """Bad ``--megatron-config`` entries, all of them."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("\n".join(errors))


def transformer_config(hf_config, config, mtp_layers: int = 0):
    """The ``TransformerConfig`` of ``hf_config`` under the options in ``config`` (a slime
    ``Config`` or any object with the Megatron options as attributes), for a model with
    ``mtp_layers`` multi-token prediction layers; an ``MLATransformerConfig`` for a family
    with multi-latent attention."""
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    from slime_megatron.checks import virtual_pipeline_size
    from slime_megatron.models.family import model_family

    kwargs = {
        **_decoder(hf_config),
        **model_family(hf_config).transformer_config(hf_config),
        **_parallel(config),
        **_interleaving(virtual_pipeline_size(config, hf_config.num_hidden_layers)),
        **_recompute(config),
        **_precision(config),
        **({"mtp_num_layers": mtp_layers} if mtp_layers else {}),
        # routers that record or replay top-k (`slime_megatron.routing_replay`); idle unless told to
        **({"moe_enable_routing_replay": True} if getattr(config, "use_routing_replay", False) else {}),
        **parse_megatron_config(getattr(config, "megatron_config", None) or []),
    }
    return (MLATransformerConfig if kwargs.get("multi_latent_attention") else TransformerConfig)(**kwargs)


def architecture_problem(hf_config) -> str | None:
    """Why the Megatron backend cannot build ``hf_config``'s architecture although its family is
    supported (a bias, router, rope or activation megatron-core has not), or None: what
    `transformer_config` and the family's model arguments raise when a rank builds the model,
    asked of the same functions by the config checks."""
    from slime_megatron.models.family import model_family

    family = model_family(hf_config)
    try:
        _decoder(hf_config)
        family.transformer_config(hf_config)
        family.model_kwargs(hf_config)
    except ValueError as exc:
        return str(exc)
    return None


def _decoder(hf_config) -> dict:
    """What Qwen2/3 and Llama share: pre-norm RMSNorm decoder layers with SwiGLU MLPs."""
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise ValueError(
            f"hidden_act '{hf_config.hidden_act}' is not supported by the Megatron backend (only silu, as SwiGLU); "
            "use --train-backend fsdp for this model"
        )
    return {
        "num_layers": hf_config.num_hidden_layers,
        "hidden_size": hf_config.hidden_size,
        "ffn_hidden_size": hf_config.intermediate_size,
        "num_attention_heads": hf_config.num_attention_heads,
        "num_query_groups": getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads,
        "kv_channels": getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads,
        "normalization": "RMSNorm",
        "layernorm_epsilon": hf_config.rms_norm_eps,
        "gated_linear_unit": True,
        "activation_func": torch.nn.functional.silu,
        "add_bias_linear": False,
        "hidden_dropout": 0.0,
        "attention_dropout": float(getattr(hf_config, "attention_dropout", 0.0) or 0.0),
        "init_method_std": getattr(hf_config, "initializer_range", 0.02),
        "use_cpu_initialization": not torch.cuda.is_available(),
    }


def _parallel(config) -> dict:
    tp = getattr(config, "tensor_model_parallel_size", 1)
    return {
        "tensor_model_parallel_size": tp,
        "pipeline_model_parallel_size": getattr(config, "pipeline_model_parallel_size", 1),
        "context_parallel_size": getattr(config, "context_parallel_size", 1),
        "expert_model_parallel_size": getattr(config, "expert_model_parallel_size", 1),
        "expert_tensor_parallel_size": getattr(config, "expert_tensor_parallel_size", None) or tp,
        "sequence_parallel": bool(getattr(config, "sequence_parallel", False)) and tp > 1,
        # uneven pipeline stages (None: the layers split evenly)
        "num_layers_in_first_pipeline_stage": getattr(config, "decoder_first_pipeline_num_layers", None),
        "num_layers_in_last_pipeline_stage": getattr(config, "decoder_last_pipeline_num_layers", None),
        # the dtype of the activations pipeline stages send each other (required with PP > 1)
        "pipeline_dtype": torch.bfloat16 if getattr(config, "bf16", False) else torch.float32,
    }


def _interleaving(virtual: int | None) -> dict:
    """Virtual pipeline stages (megatron's interleaved schedule), whose steady state sends to
    and receives from both neighbours at once: with 2 stages both are the same rank, and in one
    batch of sends and receives gloo pairs them in the order they were posted, so an activation
    landed as a gradient; unbatched, megatron sends each direction over a group of its own (as
    Megatron-LM's default overlapped communication for this schedule does). Every micro-batch
    has one shape then (`slime_megatron.inputs.same_shapes`), so none is sent ahead of it."""
    if virtual is None:
        return {}
    return {"virtual_pipeline_model_parallel_size": virtual, "batch_p2p_comm": False, "variable_seq_lengths": False}


def _recompute(config) -> dict:
    granularity = getattr(config, "recompute_granularity", None)
    if granularity is None:
        return {}
    return {
        "recompute_granularity": granularity,
        "recompute_method": getattr(config, "recompute_method", None),
        "recompute_num_layers": getattr(config, "recompute_num_layers", None),
    }


def _precision(config) -> dict:
    """float32 weights and compute, or bf16 ones with ``--bf16`` (the optimizer keeps
    float32 main weights)."""
    bf16 = bool(getattr(config, "bf16", False))
    return {"bf16": bf16, "params_dtype": torch.bfloat16 if bf16 else torch.float32}


def parse_megatron_config(pairs: list[str]) -> dict:
    """``["KEY=VALUE", ...]`` as ``TransformerConfig`` fields, each value parsed as the
    field's type (bool, int, float, str or a list of those, as YAML reads them; ``null`` is None).

    Raises :class:`MegatronConfigError` listing every bad entry: no ``=``, an unknown field
    (naming the nearest one), or a value of the wrong type.
    """
    from megatron.core.transformer.transformer_config import TransformerConfig

    fields = {f.name: f for f in dataclasses.fields(TransformerConfig)}
    values, errors = {}, []
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            errors.append(f"--megatron-config {pair!r}: write KEY=VALUE, e.g. attention_softmax_in_fp32=true")
        elif key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            errors.append(f"--megatron-config {pair!r}: '{key}' is not a field of megatron's TransformerConfig{hint}")
        else:
            try:
                values[key] = _parse_value(raw, fields[key].type)
            except ValueError as exc:
                errors.append(f"--megatron-config {pair!r}: {exc}")
    if errors:
        raise MegatronConfigError(errors)
    return values


def _parse_value(raw: str, annotation):
    """``raw`` as the field type ``annotation`` (a type or its string form)."""
    import yaml

    value = yaml.safe_load(raw) if raw else None
    if value is None:
        return None
    expected = _scalar_types(annotation)
    items = value if isinstance(value, list) else [value]
    if expected and not all(
        isinstance(item, expected) or (float in expected and isinstance(item, int)) for item in items
    ):
        raise ValueError(f"expected {' or '.join(t.__name__ for t in expected)}, got {raw!r}")
    return value


def _scalar_types(annotation) -> tuple[type, ...]:
    """The plain types an annotation allows (``Optional[int]`` -> int); () if it is not plain."""
    if isinstance(annotation, str):
        names = {"bool": bool, "int": int, "float": float, "str": str}
        return tuple(t for name, t in names.items() if name in annotation.replace("Literal", ""))
    args = typing.get_args(annotation) or (annotation,)
    plain = tuple(t for t in args if t in (bool, int, float, str))
    nested = tuple(t for a in args if typing.get_args(a) for t in _scalar_types(a))
    return plain + nested
