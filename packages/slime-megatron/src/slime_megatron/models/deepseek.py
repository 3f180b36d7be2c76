"""The DeepSeek-style MoE families: GLM-4.5/4.6/4.7 (``glm4_moe``) and DeepSeek-V3
(``deepseek_v3``, with multi-latent attention). Registered on import.

Both route tokens as DeepSeek-V3 does ("noaux_tc"): sigmoid scores, plus a per-expert
correction bias (``mlp.gate.e_score_correction_bias``, megatron's ``router.expert_bias``)
for choosing the experts only, optionally within the best groups of experts, the chosen
scores renormalised and multiplied by ``routed_scaling_factor``; the first
``first_k_dense_replace`` layers are dense, and every MoE layer adds shared experts.

The correction bias stays as the checkpoint has it (``moe_router_bias_update_rate`` 0, as
slime's launch scripts for these models set): RL keeps the routing balance the model was
trained with, and the rollout engines, which load it from the checkpoint, route the same.
Exporting weights includes it, so a run that sets a rate with ``--megatron-config`` pushes
the updated bias too.

Both families' checkpoints may hold multi-token prediction layers (``Family.mtp_layer``:
their decoder layer's rules; the rest is `slime_megatron.models.mtp`).
"""

from __future__ import annotations

from slime_megatron.models.families import (
    attention_rules,
    decoder_rules,
    dense_mlp_rules,
    layer_rules,
    mlp_rules,
    moe_rules,
    moe_runtime,
    partial_rotary_kwargs,
    rope_parameters,
)
from slime_megatron.models.family import Family, num_routed_experts, register_family
from slime_megatron.models.weight_map import WeightRule


def _is_moe_layer(i: int, hf_config) -> bool:
    return i >= hf_config.first_k_dense_replace


def deepseek_moe_rules(i: int, hf_config) -> list[WeightRule]:
    """A dense layer's MLP, or a MoE layer's router, correction bias, experts and shared experts."""
    if not _is_moe_layer(i, hf_config):
        return dense_mlp_rules(i)
    hf, mg = f"model.layers.{i}.mlp.", f"decoder.layers.{i}.mlp."
    rules = moe_rules(i, hf_config)
    rules.append(WeightRule(mg + "router.expert_bias", (hf + "gate.e_score_correction_bias",), "copy"))
    if hf_config.n_shared_experts:
        rules += mlp_rules(hf + "shared_experts.", mg + "shared_experts.")
    return rules


def deepseek_moe_config(hf_config, family: str) -> dict:
    """megatron's MoE fields for DeepSeek-V3's router (see the module's docstring)."""
    _check_router(hf_config, family)
    groups = hf_config.n_group or 1
    shared = (hf_config.n_shared_experts or 0) * hf_config.moe_intermediate_size
    return {
        "num_moe_experts": num_routed_experts(hf_config),
        "moe_router_topk": hf_config.num_experts_per_tok,
        "moe_ffn_hidden_size": hf_config.moe_intermediate_size,
        "moe_shared_expert_intermediate_size": shared or None,
        "moe_layer_freq": [int(_is_moe_layer(i, hf_config)) for i in range(hf_config.num_hidden_layers)],
        "moe_router_score_function": "sigmoid",
        "moe_router_enable_expert_bias": True,
        "moe_router_bias_update_rate": 0.0,
        "moe_router_num_groups": groups if groups > 1 else None,
        "moe_router_group_topk": hf_config.topk_group if groups > 1 else None,
        "moe_router_topk_scaling_factor": hf_config.routed_scaling_factor,
        "moe_router_dtype": "fp32",  # Hugging Face computes the router's logits in float32
        **moe_runtime(),
    }


def _check_router(hf_config, family: str) -> None:
    """The two points where megatron's sigmoid router is narrower than DeepSeek-V3's."""
    fix = "; use --train-backend fsdp for this model"
    if not hf_config.norm_topk_prob:
        raise ValueError(
            f"{family} with norm_topk_prob false is not supported by the Megatron backend (megatron-core "
            f"always renormalises the chosen sigmoid scores){fix}"
        )
    groups, top_k, top_groups = hf_config.n_group or 1, hf_config.num_experts_per_tok, hf_config.topk_group
    if groups > 1 and top_k // top_groups != 2:
        raise ValueError(
            f"{family} with n_group {groups}: megatron-core ranks expert groups by their best "
            f"num_experts_per_tok // topk_group = {top_k // top_groups} experts, Hugging Face by their "
            f"best 2{fix}"
        )


# ------------------------------------------------------------------ GLM-4.5+ MoE


def _glm4_moe_config(hf_config) -> dict:
    return {
        "add_qkv_bias": bool(hf_config.attention_bias),  # q/k/v only: GLM's o_proj has no bias
        "qk_layernorm": bool(hf_config.use_qk_norm),
        **deepseek_moe_config(hf_config, "glm4_moe"),
    }


def _glm4_moe_parts(hf_config):
    """GLM-4.5's attention and MLP rules, by layer index."""

    def attention(i):
        return attention_rules(i, qkv_bias=hf_config.attention_bias, qk_norm=hf_config.use_qk_norm)

    return attention, lambda i: deepseek_moe_rules(i, hf_config)


GLM4_MOE = Family(
    "glm4_moe",
    ("glm4_moe",),
    _glm4_moe_config,
    lambda c: decoder_rules(c, *_glm4_moe_parts(c)),
    partial_rotary_kwargs,
    mtp_layer=lambda c, i: layer_rules(i, *_glm4_moe_parts(c)),
)

# ------------------------------------------------------------------ DeepSeek-V3 (multi-latent attention)


def _deepseek_v3_config(hf_config) -> dict:
    if hf_config.attention_bias:
        raise ValueError(
            "deepseek_v3 with attention_bias is not supported by the Megatron backend (megatron-core's "
            "multi-latent attention has no biases); use --train-backend fsdp"
        )
    if not getattr(hf_config, "rope_interleave", True):
        raise ValueError(
            "deepseek_v3 with rope_interleave false is not supported by the Megatron backend (megatron-"
            "core's multi-latent attention rotates interleaved channels); use --train-backend fsdp"
        )
    return {
        "multi_latent_attention": True,
        "q_lora_rank": hf_config.q_lora_rank,
        "kv_lora_rank": hf_config.kv_lora_rank,
        "qk_head_dim": hf_config.qk_nope_head_dim,
        "qk_pos_emb_head_dim": hf_config.qk_rope_head_dim,
        "v_head_dim": hf_config.v_head_dim,
        "qk_layernorm": True,  # the norms of the compressed q and kv (q_a_layernorm, kv_a_layernorm)
        **mla_rope(hf_config),
        **deepseek_moe_config(hf_config, "deepseek_v3"),
    }


def mla_rope(hf_config) -> dict:
    """The rotary fields of megatron's ``MLATransformerConfig``: plain RoPE, or YaRN."""
    rope = rope_parameters(hf_config)
    kind = rope.get("rope_type", rope.get("type", "default"))
    theta = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    if kind == "default":
        return {"rope_type": "rope", "rotary_base": theta}
    if kind == "yarn":
        return {
            "rope_type": "yarn",
            "rotary_base": theta,
            "rotary_scaling_factor": rope["factor"],
            "original_max_position_embeddings": rope["original_max_position_embeddings"],
            "beta_fast": rope.get("beta_fast", 32.0),
            "beta_slow": rope.get("beta_slow", 1.0),
            "mscale": rope.get("mscale", 1.0),
            "mscale_all_dim": rope.get("mscale_all_dim", 0.0),
        }
    raise ValueError(
        f"rope {rope} is not supported by the Megatron backend for deepseek_v3: megatron-core's "
        "multi-latent attention has plain RoPE and YaRN; use --train-backend fsdp"
    )


def mla_rules(i: int, hf_config) -> list[WeightRule]:
    """Multi-latent attention: q (low-rank, or one projection without q_lora_rank), the joint
    kv compression with the shared rope key, its norm, the kv up-projection, the output."""
    hf, attn = f"model.layers.{i}.self_attn.", f"decoder.layers.{i}.self_attention."
    if hf_config.q_lora_rank:
        rules = [
            WeightRule(attn + "linear_q_down_proj.weight", (hf + "q_a_proj.weight",), "column"),
            WeightRule(attn + "q_layernorm.weight", (hf + "q_a_layernorm.weight",), "copy"),
            WeightRule(attn + "linear_q_up_proj.weight", (hf + "q_b_proj.weight",), "column"),
        ]
    else:
        rules = [WeightRule(attn + "linear_q_proj.weight", (hf + "q_proj.weight",), "column")]
    return rules + [
        WeightRule(attn + "linear_kv_down_proj.weight", (hf + "kv_a_proj_with_mqa.weight",), "column"),
        WeightRule(attn + "kv_layernorm.weight", (hf + "kv_a_layernorm.weight",), "copy"),
        WeightRule(attn + "linear_kv_up_proj.weight", (hf + "kv_b_proj.weight",), "column"),
        WeightRule(attn + "linear_proj.weight", (hf + "o_proj.weight",), "row"),
    ]


def _mla_layer_spec(spec):
    """megatron-core 0.16's local spec cannot build multi-latent attention's core attention
    (see `slime_megatron.models.specs.MLACoreAttention`); imported here, as megatron is, only
    when a model is built."""
    from slime_megatron.models.specs import with_mla_core_attention

    return with_mla_core_attention(spec)


def _deepseek_v3_parts(hf_config):
    """DeepSeek-V3's attention and MLP rules, by layer index."""
    return lambda i: mla_rules(i, hf_config), lambda i: deepseek_moe_rules(i, hf_config)


DEEPSEEK_V3 = Family(
    "deepseek_v3",
    ("deepseek_v3",),
    _deepseek_v3_config,
    lambda c: decoder_rules(c, *_deepseek_v3_parts(c)),
    layer_spec=_mla_layer_spec,
    mtp_layer=lambda c, i: layer_rules(i, *_deepseek_v3_parts(c)),
)

for _family in (GLM4_MOE, DEEPSEEK_V3):
    register_family(_family)
