"""A Qwen3-MoE model in the CPU engine takes its experts by the per-expert names trainers
export (Megatron's HF export, hub checkpoints), though transformers stores them fused."""

import pytest
import torch

from slime_sglang.cpu_engine.weights import apply_update, check_update


def tiny_moe(seed: int):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        "qwen3_moe",
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        mlp_only_layers=[1],
        max_position_embeddings=64,
    )
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config).eval()


def per_expert(model) -> list[tuple[str, torch.Tensor]]:
    """The model's weights as a per-expert checkpoint names them (the fused experts split up)."""
    named = []
    for name, tensor in model.state_dict().items():
        prefix, _, kind = name.rpartition(".")
        if kind == "gate_up_proj":
            half = tensor.shape[1] // 2
            for e in range(tensor.shape[0]):
                named += [
                    (f"{prefix}.{e}.gate_proj.weight", tensor[e, :half]),
                    (f"{prefix}.{e}.up_proj.weight", tensor[e, half:]),
                ]
        elif kind == "down_proj" and tensor.dim() == 3:
            named += [(f"{prefix}.{e}.down_proj.weight", tensor[e]) for e in range(tensor.shape[0])]
        else:
            named.append((name, tensor))
    return named


def test_per_expert_weights_fill_the_fused_experts_exactly():
    engine, trained = tiny_moe(seed=0), tiny_moe(seed=1)
    named = per_expert(trained)
    assert any(".experts.3.up_proj.weight" in name for name, _ in named)
    assert check_update(engine, named, complete=True) is None
    apply_update(engine, named)
    for name, tensor in trained.state_dict().items():
        assert torch.equal(engine.state_dict()[name], tensor), name
    ids = torch.tensor([[5, 6, 7, 8]])
    assert torch.equal(engine(ids).logits, trained(ids).logits)


def test_a_partial_or_misshapen_expert_update_is_refused_before_anything_changes():
    engine = tiny_moe(seed=0)
    before = {name: t.clone() for name, t in engine.state_dict().items()}
    named = per_expert(tiny_moe(seed=1))
    without_one = [(name, t) for name, t in named if name != "model.layers.0.mlp.experts.2.up_proj.weight"]
    assert "lacks 1 parameter(s), e.g. ['model.layers.0.mlp.experts.gate_up_proj']" in check_update(
        engine, without_one, complete=True
    )
    wrong = [("model.layers.0.mlp.experts.1.gate_proj.weight", torch.zeros(16, 16))]
    assert "wrong shape for model.layers.0.mlp.experts.1.gate_proj.weight (16, 16) (model: (16, 32))" in check_update(
        engine, wrong
    )
    assert "unknown parameter name(s) ['model.layers.0.mlp.experts.4.gate_proj.weight']" in check_update(
        engine, [("model.layers.0.mlp.experts.4.gate_proj.weight", torch.zeros(16, 32))]
    )
    assert all(torch.equal(engine.state_dict()[name], t) for name, t in before.items())


@pytest.mark.parametrize("proj, rows", [("gate_proj", slice(0, 16)), ("up_proj", slice(16, 32))])
def test_gate_and_up_go_to_their_halves_of_gate_up_proj(proj, rows):
    engine = tiny_moe(seed=0)
    update = torch.full((16, 32), 7.0)
    apply_update(engine, [(f"model.layers.0.mlp.experts.2.{proj}.weight", update)])
    fused = engine.model.layers[0].mlp.experts.gate_up_proj
    assert torch.equal(fused[2, rows], update)
    assert not torch.equal(fused[1, rows], update)
