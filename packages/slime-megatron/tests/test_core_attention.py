"""The fused core attention (`slime_megatron.models.core_attention`): built into every layer,
taken on a causal forward, and equal to megatron's local attention, with grouped-query heads
(Qwen3) and multi-latent attention's narrower value heads (DeepSeek-V3)."""

from types import SimpleNamespace

import pytest
import torch

from slime_megatron.processes import run_on_ranks

SIZES = SimpleNamespace(
    tensor_model_parallel_size=1,
    pipeline_model_parallel_size=1,
    context_parallel_size=1,
    expert_model_parallel_size=1,
    expert_tensor_parallel_size=None,
    seed=1234,
)


def _fused_against_local(rank, sizes, hf_config):
    """Build the model; per layer, whether its core attention is fused; the largest difference
    between the fused and megatron's local attention on random inputs; fused calls in a forward."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    from slime_megatron.models import build_model
    from slime_megatron.models.core_attention import SDPACoreAttention

    model = build_model(hf_config, sizes).eval()
    cores = [layer.self_attention.core_attention for layer in model.decoder.layers]
    core = cores[0]
    generator = torch.Generator().manual_seed(0)
    heads, groups = core.num_attention_heads_per_partition, core.num_query_groups_per_partition
    key_dim = (
        core.hidden_size_per_attention_head
        if not hasattr(hf_config, "qk_rope_head_dim")
        else hf_config.qk_nope_head_dim + hf_config.qk_rope_head_dim
    )
    value_dim = core.hidden_size_per_partition // heads
    kv_heads = heads if hasattr(hf_config, "qk_rope_head_dim") else groups
    device = next(model.parameters()).device
    q, k, v = (
        torch.randn(9, 2, h, d, generator=generator).to(device)
        for h, d in ((heads, key_dim), (kv_heads, key_dim), (kv_heads, value_dim))
    )
    with torch.no_grad():
        difference = (core.fused_forward(q, k, v) - DotProductAttention.forward(core, q, k, v, None)).abs().max()
        calls = []
        for c in cores:
            c.fused_forward = (lambda original: lambda *a: calls.append(1) or original(*a))(c.fused_forward)
        model(
            torch.randint(0, 100, (2, 12), generator=generator).to(device),
            torch.arange(12, device=device).expand(2, 12),
            None,
        )
    return [isinstance(c, SDPACoreAttention) for c in cores], float(difference), len(calls)


@pytest.mark.parametrize("family", ["qwen3", "deepseek_v3"])
def test_every_layer_runs_the_fused_attention_and_it_equals_megatrons_local_one(family):
    from slime_core.tools.tiny_models import tiny_config

    config = tiny_config(family, hidden_size=32)
    ((fused, difference, calls),) = run_on_ranks(_fused_against_local, 1, SIZES, config)
    assert fused == [True] * config.num_hidden_layers
    assert calls == config.num_hidden_layers
    assert difference < 1e-5
