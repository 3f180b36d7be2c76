"""The built-in families: Qwen2/2.5 (qkv bias), Qwen3 (q/k norm), Llama 3 (llama3 rope
scaling) and Qwen3-MoE (q/k norm, router and experts). Registered on import."""

from __future__ import annotations

import torch

from slime_megatron.models.family import Family, register_family
from slime_megatron.models.weight_map import WeightRule


def _rules(hf_config, *, qkv_bias: bool = False, qk_norm: bool = False, moe: bool = False) -> list[WeightRule]:
    """Every parameter of a (Qwen/Llama-style) decoder, embeddings to output layer."""
    rules = [WeightRule("embedding.word_embeddings.weight", ("model.embed_tokens.weight",), "column")]
    for i in range(hf_config.num_hidden_layers):
        rules += _attention_rules(i, qkv_bias, qk_norm)
        rules += _moe_rules(i, hf_config) if moe and _is_moe_layer(i, hf_config) else _mlp_rules(i)
    rules.append(WeightRule("decoder.final_layernorm.weight", ("model.norm.weight",), "copy"))
    if not hf_config.tie_word_embeddings:
        rules.append(WeightRule("output_layer.weight", ("lm_head.weight",), "column"))
    return rules


def _attention_rules(i: int, qkv_bias: bool, qk_norm: bool) -> list[WeightRule]:
    hf, mg = f"model.layers.{i}.", f"decoder.layers.{i}."
    attn = mg + "self_attention."
    rules = [
        WeightRule(mg + "input_layernorm.weight", (hf + "input_layernorm.weight",), "copy"),
        WeightRule(attn + "linear_qkv.weight", tuple(f"{hf}self_attn.{p}_proj.weight" for p in "qkv"), "qkv"),
        WeightRule(attn + "linear_proj.weight", (hf + "self_attn.o_proj.weight",), "row"),
        WeightRule(mg + "pre_mlp_layernorm.weight", (hf + "post_attention_layernorm.weight",), "copy"),
    ]
    if qkv_bias:
        rules.append(WeightRule(attn + "linear_qkv.bias", tuple(f"{hf}self_attn.{p}_proj.bias" for p in "qkv"), "qkv"))
    if qk_norm:
        rules.append(WeightRule(attn + "q_layernorm.weight", (hf + "self_attn.q_norm.weight",), "copy"))
        rules.append(WeightRule(attn + "k_layernorm.weight", (hf + "self_attn.k_norm.weight",), "copy"))
    return rules


def _mlp_rules(i: int) -> list[WeightRule]:
    hf, mg = f"model.layers.{i}.mlp.", f"decoder.layers.{i}.mlp."
    return [
        WeightRule(mg + "linear_fc1.weight", (hf + "gate_proj.weight", hf + "up_proj.weight"), "gate_up"),
        WeightRule(mg + "linear_fc2.weight", (hf + "down_proj.weight",), "row"),
    ]


def _moe_rules(i: int, hf_config) -> list[WeightRule]:
    hf, mg = f"model.layers.{i}.mlp.", f"decoder.layers.{i}.mlp."
    rules = [WeightRule(mg + "router.weight", (hf + "gate.weight",), "copy")]
    for e in range(hf_config.num_experts):
        expert, local = f"{hf}experts.{e}.", f"{mg}experts.local_experts.{e}."
        rules.append(WeightRule(local + "linear_fc1.weight", (expert + "gate_proj.weight", expert + "up_proj.weight"), "gate_up", e))
        rules.append(WeightRule(local + "linear_fc2.weight", (expert + "down_proj.weight",), "row", e))
    return rules


def _is_moe_layer(i: int, hf_config) -> bool:
    """Qwen3-MoE: a layer is sparse unless listed in mlp_only_layers, every decoder_sparse_step-th."""
    step = getattr(hf_config, "decoder_sparse_step", 1) or 1
    return i not in (getattr(hf_config, "mlp_only_layers", None) or []) and (i + 1) % step == 0


def rope_kwargs(hf_config) -> dict:
    """GPTModel's rotary arguments: plain RoPE, or Llama 3.1's frequency scaling (which
    megatron-core implements with low/high frequency factors 1 and 4 over 8192 positions)."""
    rope = dict(getattr(hf_config, "rope_parameters", None) or getattr(hf_config, "rope_scaling", None) or {})
    theta = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "default":
        return {"rotary_base": theta}
    llama3 = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    if kind == "llama3" and all(rope.get(key) == value for key, value in llama3.items()):
        return {"rotary_base": theta, "rope_scaling": True, "rope_scaling_factor": rope["factor"]}
    raise ValueError(f"rope {rope} is not supported by the Megatron backend: megatron-core's GPTModel has plain "
                     f"RoPE and Llama 3.1 scaling with {llama3}; use --train-backend fsdp for this model")


def _no_linear_biases(hf_config, family: str) -> None:
    """Megatron has one switch for the biases of all linear layers; these families have none."""
    if getattr(hf_config, "attention_bias", False) or getattr(hf_config, "mlp_bias", False):
        raise ValueError(f"{family} with attention_bias or mlp_bias is not supported by the Megatron backend "
                         "(megatron-core cannot give q/k/v/o or MLP biases separately); use --train-backend fsdp")


def _qwen2_config(hf_config) -> dict:
    return {"add_qkv_bias": True}


def _qwen3_config(hf_config) -> dict:
    _no_linear_biases(hf_config, "qwen3")
    return {"qk_layernorm": True}


def _llama_config(hf_config) -> dict:
    _no_linear_biases(hf_config, "llama")
    return {}


def _qwen3_moe_config(hf_config) -> dict:
    """Qwen3-MoE's router: softmax over all experts then top-k (renormalised when
    norm_topk_prob), which is megatron's top-k-then-softmax, or pre-softmax without it."""
    _no_linear_biases(hf_config, "qwen3_moe")
    return {
        "qk_layernorm": True,
        "num_moe_experts": hf_config.num_experts,
        "moe_router_topk": hf_config.num_experts_per_tok,
        "moe_ffn_hidden_size": hf_config.moe_intermediate_size,
        "moe_router_pre_softmax": not hf_config.norm_topk_prob,
        "moe_layer_freq": [int(_is_moe_layer(i, hf_config)) for i in range(hf_config.num_hidden_layers)],
        "moe_router_load_balancing_type": "none",
        "moe_aux_loss_coeff": 0.0,
        # all-to-all is the fast one on GPUs; it needs CUDA streams, all-gather does not
        "moe_token_dispatcher_type": "alltoall" if torch.cuda.is_available() else "allgather",
    }


QWEN2 = Family("qwen2", ("qwen2",), _qwen2_config, lambda c: _rules(c, qkv_bias=True), rope_kwargs)
QWEN3 = Family("qwen3", ("qwen3",), _qwen3_config, lambda c: _rules(c, qk_norm=True), rope_kwargs)
LLAMA = Family("llama", ("llama",), _llama_config, _rules, rope_kwargs)
QWEN3_MOE = Family("qwen3_moe", ("qwen3_moe",), _qwen3_moe_config, lambda c: _rules(c, qk_norm=True, moe=True), rope_kwargs)

for _family in (QWEN2, QWEN3, LLAMA, QWEN3_MOE):
    register_family(_family)
