"""Context parallelism's pieces on two spawned gloo ranks (`slime_megatron.context`): the
key/value exchange of the core attention against plain causal attention over whole rows
(forward and backward), a whole model's logits on split rows for every family (rotary
positions per chunk; grouped-query heads, DeepSeek-V3's multi-latent attention with YaRN),
and the assembly of the ranks' per-token values."""

import pytest
import torch

WIDTH = 16  # columns of a row: 4 chunks of 4 over 2 CP ranks


def _qkv_and_upstream():
    """Whole-row query [W, b, heads, d], key/value [W, b, groups, d], and the gradient of the
    attention's output [W, b, heads·d]."""
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(WIDTH, 2, 4, 8, generator=generator)
    k, v = (torch.randn(WIDTH, 2, 2, 8, generator=generator) for _ in range(2))
    return q, k, v, torch.randn(WIDTH, 2, 32, generator=generator)


def _exchange_rank(rank, sizes):
    """This CP rank's output and query/key/value gradients of its columns."""
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig

    from slime_megatron.context import zigzag_columns
    from slime_megatron.models.core_attention import SDPACoreAttention

    config = TransformerConfig(
        num_layers=1,
        hidden_size=32,
        num_attention_heads=4,
        num_query_groups=2,
        kv_channels=8,
        context_parallel_size=2,
        attention_dropout=0.0,
        use_cpu_initialization=True,
    )
    core = SDPACoreAttention(config, layer_number=1, attn_mask_type=AttnMaskType.causal, attention_type="self")
    columns = zigzag_columns(WIDTH, rank, 2)
    q, k, v, upstream = _qkv_and_upstream()
    q, k, v = (x[columns].clone().requires_grad_() for x in (q, k, v))
    out = core(q, k, v, None)
    out.backward(upstream[columns])
    return columns, out.detach(), q.grad, k.grad, v.grad


def test_the_key_value_exchange_equals_causal_attention_over_the_whole_rows(run_ranks):
    """Each rank's outputs and gradients are those of its columns in one causal attention over
    the whole rows: the keys and values of the other rank arrive in global order, each chunk
    sees the positions before it, and their gradients go back to the rank that holds them."""
    results = run_ranks(_exchange_rank, 2, cp=2)
    q, k, v, upstream = (x.clone().requires_grad_() for x in _qkv_and_upstream())
    heads = (x.permute(1, 2, 0, 3) for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(*heads, is_causal=True, enable_gqa=True)
    out = out.permute(2, 0, 1, 3).reshape(WIDTH, 2, 32)
    out.backward(upstream.detach())
    assert sorted(torch.cat([r[0] for r in results]).tolist()) == list(range(WIDTH))
    for columns, *got in results:
        for mine, whole in zip(got, (out.detach(), q.grad, k.grad, v.grad)):
            torch.testing.assert_close(mine, whole[columns], rtol=1e-5, atol=1e-6)


def _logits_rank(rank, sizes, hf_config):
    """The model's logits on this rank's columns of two rows (the whole rows without CP)."""
    from slime_megatron.context import zigzag_columns
    from slime_megatron.models import build_model

    torch.manual_seed(0)  # the same initial weights on every layout
    model = build_model(hf_config, sizes).eval()
    tokens = torch.randint(0, 100, (2, WIDTH), generator=torch.Generator().manual_seed(1))
    columns = zigzag_columns(WIDTH, rank, sizes.context_parallel_size)
    positions = torch.arange(WIDTH).expand(2, WIDTH)
    with torch.no_grad():
        return columns, model(tokens[:, columns], positions[:, columns], None)


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama", "qwen3_moe", "glm4", "glm4_moe", "deepseek_v3"])
def test_a_model_on_split_rows_gives_the_logits_of_whole_rows(run_ranks, family):
    """Two CP ranks' logits are the one-rank logits of their columns, for every family the
    backend builds: every chunk's rotary positions (Llama 3.1's scaling, GLM's partial
    rotary, DeepSeek-V3's YaRN) and attention are its global ones."""
    from slime_core.tools.tiny_models import tiny_config

    config = tiny_config(family, hidden_size=32)
    ((_, whole),) = run_ranks(_logits_rank, 1, config)
    for columns, logits in run_ranks(_logits_rank, 2, config, cp=2):
        torch.testing.assert_close(logits, whole[:, columns], rtol=1e-4, atol=1e-5)


def _assemble_rank(rank, sizes):
    """Rank r holds the rows where ``owner == r`` of (6, 5) values: the assembled whole, and
    the gradient of Σ weights·whole in its rows."""
    from megatron.core import parallel_state

    from slime_megatron.context import assemble

    values, owner, weights = _rows()
    mine = owner == rank
    local = values[mine].clone().requires_grad_()
    whole = assemble(local, mine, parallel_state.get_context_parallel_group())
    (weights * whole).sum().backward()
    return whole.detach(), local.grad


def _rows():
    generator = torch.Generator().manual_seed(2)
    owner = torch.tensor([0, 1, 1, 0, 1, 1])
    return torch.randn(6, 5, generator=generator), owner, torch.randn(6, 5, generator=generator)


def test_assembled_rows_are_the_whole_on_every_rank_and_each_rank_gets_its_rows_gradient(run_ranks):
    """`assemble` (per-token log-probs and entropy, or a loss's full-vocabulary rows): every
    CP rank sees all rows in order, and the backward of a loss that every rank computes on them
    reaches each rank once, in its own rows."""
    values, owner, weights = _rows()
    for rank, (whole, grad) in enumerate(run_ranks(_assemble_rank, 2, cp=2)):
        assert torch.equal(whole, values)
        assert torch.equal(grad, weights[owner == rank])
