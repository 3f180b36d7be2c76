"""The built-in families: Qwen2/2.5 (qkv bias), Qwen3 (q/k norm), Llama 3 (llama3 rope
scaling) and Qwen3-MoE (q/k norm, router and experts), registered on import; and the parts of
a decoder's weight rules and config that the other families (:mod:`slime_megatron.models.deepseek`:
GLM-4.5+ MoE, DeepSeek-V3; :mod:`slime_megatron.models.glm4`: GLM-4) share with them."""

from __future__ import annotations

from collections.abc import Callable

import torch

from slime_megatron.models.family import Family, num_routed_experts, register_family
from slime_megatron.models.weight_map import WeightRule

LayerRules = Callable[[int], list[WeightRule]]  # layer index -> the rules of that layer's part


def decoder_rules(hf_config, attention: LayerRules, mlp: LayerRules) -> list[WeightRule]:
    """Every parameter of a pre-norm decoder, embeddings to output layer, each layer's
    attention and MLP (dense or MoE) given by ``attention`` and ``mlp``."""
    rules = [WeightRule("embedding.word_embeddings.weight", ("model.embed_tokens.weight",), "column")]
    for i in range(hf_config.num_hidden_layers):
        rules += layer_rules(i, attention, mlp)
    rules.append(WeightRule("decoder.final_layernorm.weight", ("model.norm.weight",), "copy"))
    if not hf_config.tie_word_embeddings:
        rules.append(WeightRule("output_layer.weight", ("lm_head.weight",), "column"))
    return rules


def layer_rules(i: int, attention: LayerRules, mlp: LayerRules) -> list[WeightRule]:
    """Decoder layer ``i``: its two pre-norms, attention and MLP (also the decoder layer inside
    a multi-token prediction layer: `slime_megatron.models.mtp`)."""
    hf, mg = f"model.layers.{i}.", f"decoder.layers.{i}."
    return [
        WeightRule(mg + "input_layernorm.weight", (hf + "input_layernorm.weight",), "copy"),
        *attention(i),
        WeightRule(mg + "pre_mlp_layernorm.weight", (hf + "post_attention_layernorm.weight",), "copy"),
        *mlp(i),
    ]


def attention_rules(i: int, qkv_bias: bool = False, qk_norm: bool = False) -> list[WeightRule]:
    """Grouped-query attention: fused q/k/v (and their biases), output projection, q/k norms."""
    hf, attn = f"model.layers.{i}.self_attn.", f"decoder.layers.{i}.self_attention."
    rules = [
        WeightRule(attn + "linear_qkv.weight", tuple(f"{hf}{p}_proj.weight" for p in "qkv"), "qkv"),
        WeightRule(attn + "linear_proj.weight", (hf + "o_proj.weight",), "row"),
    ]
    if qkv_bias:
        rules.append(WeightRule(attn + "linear_qkv.bias", tuple(f"{hf}{p}_proj.bias" for p in "qkv"), "qkv"))
    if qk_norm:
        rules.append(WeightRule(attn + "q_layernorm.weight", (hf + "q_norm.weight",), "copy"))
        rules.append(WeightRule(attn + "k_layernorm.weight", (hf + "k_norm.weight",), "copy"))
    return rules


def mlp_rules(hf_prefix: str, megatron_prefix: str) -> list[WeightRule]:
    """A SwiGLU MLP: gate and up fused into ``linear_fc1``, down is ``linear_fc2``."""
    hf, mg = hf_prefix, megatron_prefix
    return [
        WeightRule(mg + "linear_fc1.weight", (hf + "gate_proj.weight", hf + "up_proj.weight"), "gate_up"),
        WeightRule(mg + "linear_fc2.weight", (hf + "down_proj.weight",), "row"),
    ]


def dense_mlp_rules(i: int) -> list[WeightRule]:
    return mlp_rules(f"model.layers.{i}.mlp.", f"decoder.layers.{i}.mlp.")


def moe_rules(i: int, hf_config) -> list[WeightRule]:
    """A MoE layer's router (``mlp.gate``) and routed experts (one rule per expert)."""
    hf, mg = f"model.layers.{i}.mlp.", f"decoder.layers.{i}.mlp."
    rules = [WeightRule(mg + "router.weight", (hf + "gate.weight",), "copy")]
    for e in range(num_routed_experts(hf_config)):
        expert, local = f"{hf}experts.{e}.", f"{mg}experts.local_experts.{e}."
        rules += [WeightRule(r.megatron, r.hf, r.kind, e) for r in mlp_rules(expert, local)]
    return rules


def _is_qwen3_moe_layer(i: int, hf_config) -> bool:
    """Qwen3-MoE: a layer is sparse unless listed in mlp_only_layers, every decoder_sparse_step-th."""
    step = getattr(hf_config, "decoder_sparse_step", 1) or 1
    return i not in (getattr(hf_config, "mlp_only_layers", None) or []) and (i + 1) % step == 0


def rope_parameters(hf_config) -> dict:
    """The config's rope settings (transformers 5's ``rope_parameters``, or ``rope_scaling``)."""
    return dict(getattr(hf_config, "rope_parameters", None) or getattr(hf_config, "rope_scaling", None) or {})


def rope_kwargs(hf_config) -> dict:
    """GPTModel's rotary arguments: plain RoPE, or Llama 3.1's frequency scaling (which
    megatron-core implements with low/high frequency factors 1 and 4 over 8192 positions)."""
    rope = rope_parameters(hf_config)
    theta = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "default":
        return {"rotary_base": theta}
    llama3 = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    if kind == "llama3" and all(rope.get(key) == value for key, value in llama3.items()):
        return {"rotary_base": theta, "rope_scaling": True, "rope_scaling_factor": rope["factor"]}
    raise ValueError(
        f"rope {rope} is not supported by the Megatron backend: megatron-core's GPTModel has plain "
        f"RoPE and Llama 3.1 scaling with {llama3}; use --train-backend fsdp for this model"
    )


def partial_rotary_kwargs(hf_config) -> dict:
    """`rope_kwargs`, RoPE on the first ``partial_rotary_factor`` of each head's channels (GLM: a half)."""
    factor = rope_parameters(hf_config).get("partial_rotary_factor", getattr(hf_config, "partial_rotary_factor", 1.0))
    return {**rope_kwargs(hf_config), "rotary_percent": factor}


def no_linear_biases(hf_config, family: str) -> None:
    """Megatron has one switch for the biases of all linear layers; these families have none."""
    if getattr(hf_config, "attention_bias", False) or getattr(hf_config, "mlp_bias", False):
        raise ValueError(
            f"{family} with attention_bias or mlp_bias is not supported by the Megatron backend "
            "(megatron-core cannot give q/k/v/o or MLP biases separately); use --train-backend fsdp"
        )


def moe_runtime() -> dict:
    """What every MoE family trains with: no auxiliary load-balancing loss (RL keeps the
    checkpoint's routing), and the token dispatcher this device supports."""
    return {
        "moe_router_load_balancing_type": "none",
        "moe_aux_loss_coeff": 0.0,
        # all-to-all is the fast one on GPUs; it needs CUDA streams, all-gather does not
        "moe_token_dispatcher_type": "alltoall" if torch.cuda.is_available() else "allgather",
    }


def _qwen2_config(hf_config) -> dict:
    return {"add_qkv_bias": True}


def _qwen3_config(hf_config) -> dict:
    no_linear_biases(hf_config, "qwen3")
    return {"qk_layernorm": True}


def _llama_config(hf_config) -> dict:
    no_linear_biases(hf_config, "llama")
    return {}


def _qwen3_moe_config(hf_config) -> dict:
    """Qwen3-MoE's router: softmax over all experts then top-k (renormalised when
    norm_topk_prob), which is megatron's top-k-then-softmax, or pre-softmax without it."""
    no_linear_biases(hf_config, "qwen3_moe")
    return {
        "qk_layernorm": True,
        "num_moe_experts": hf_config.num_experts,
        "moe_router_topk": hf_config.num_experts_per_tok,
        "moe_ffn_hidden_size": hf_config.moe_intermediate_size,
        "moe_router_pre_softmax": not hf_config.norm_topk_prob,
        "moe_layer_freq": [int(_is_qwen3_moe_layer(i, hf_config)) for i in range(hf_config.num_hidden_layers)],
        **moe_runtime(),
    }


def _qwen_rules(hf_config, qkv_bias: bool = False, qk_norm: bool = False) -> list[WeightRule]:
    def mlp(i):
        moe = getattr(hf_config, "num_experts", None) and _is_qwen3_moe_layer(i, hf_config)
        return moe_rules(i, hf_config) if moe else dense_mlp_rules(i)

    return decoder_rules(hf_config, lambda i: attention_rules(i, qkv_bias, qk_norm), mlp)


QWEN2 = Family("qwen2", ("qwen2",), _qwen2_config, lambda c: _qwen_rules(c, qkv_bias=True), rope_kwargs)
QWEN3 = Family("qwen3", ("qwen3",), _qwen3_config, lambda c: _qwen_rules(c, qk_norm=True), rope_kwargs)
LLAMA = Family("llama", ("llama",), _llama_config, _qwen_rules, rope_kwargs)
QWEN3_MOE = Family("qwen3_moe", ("qwen3_moe",), _qwen3_moe_config, lambda c: _qwen_rules(c, qk_norm=True), rope_kwargs)

for _family in (QWEN2, QWEN3, LLAMA, QWEN3_MOE):
    register_family(_family)
