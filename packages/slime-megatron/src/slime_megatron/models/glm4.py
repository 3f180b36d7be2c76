"""GLM-4 dense (GLM-4-0414, ``glm4``): a Llama-like decoder with q/k/v biases, interleaved
RoPE on half of each head's channels, gate and up in one checkpoint tensor, and "sandwich"
norms: besides the usual pre-norms, an RMSNorm on the attention's output
(``post_self_attn_layernorm``) and on the MLP's (``post_mlp_layernorm``), before each
residual add. Registered on import.

megatron-core's transformer layer has no norm there; the output projections can carry it:
`slime_megatron.models.specs.PostNormRowParallelLinear` is megatron's ``RowParallelLinear``
followed by an RMSNorm of its output, and GLM-4's layer spec uses it for both ``linear_proj``
and ``linear_fc2``.
"""

from __future__ import annotations

from slime_megatron.models.families import attention_rules, decoder_rules, partial_rotary_kwargs
from slime_megatron.models.family import Family, register_family
from slime_megatron.models.weight_map import WeightRule


def _glm4_config(hf_config) -> dict:
    return {"add_qkv_bias": bool(hf_config.attention_bias), "rotary_interleaved": True}


def _glm4_rules(hf_config) -> list[WeightRule]:
    def attention(i):
        hf, proj = f"model.layers.{i}.", f"decoder.layers.{i}.self_attention.linear_proj."
        return attention_rules(i, qkv_bias=hf_config.attention_bias) + [
            WeightRule(proj + "post_layernorm.weight", (hf + "post_self_attn_layernorm.weight",), "copy")
        ]

    def mlp(i):
        hf, mg = f"model.layers.{i}.", f"decoder.layers.{i}.mlp."
        return [
            WeightRule(mg + "linear_fc1.weight", (hf + "mlp.gate_up_proj.weight",), "fused_gate_up"),
            WeightRule(mg + "linear_fc2.weight", (hf + "mlp.down_proj.weight",), "row"),
            WeightRule(mg + "linear_fc2.post_layernorm.weight", (hf + "post_mlp_layernorm.weight",), "copy"),
        ]

    return decoder_rules(hf_config, attention, mlp)


def _glm4_layer_spec(spec):
    """Megatron's local spec with every row-parallel linear (the attention's and the MLP's
    output projections) followed by its norm (imported here, as megatron is, only when a model
    is built)."""
    from megatron.core.tensor_parallel import RowParallelLinear

    from slime_megatron.models.specs import PostNormRowParallelLinear, replace_module

    return replace_module(spec, RowParallelLinear, PostNormRowParallelLinear)


GLM4 = Family("glm4", ("glm4",), _glm4_config, _glm4_rules, partial_rotary_kwargs, _glm4_layer_spec)
register_family(GLM4)
