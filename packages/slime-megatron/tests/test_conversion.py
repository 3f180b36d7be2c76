"""HF ⇄ Megatron conversion for every built-in family: bit-exact round trips in memory and
through real tensor-/expert-parallel megatron models, and logits equal to transformers'."""

from types import SimpleNamespace

import pytest
import torch

from slime_megatron.models import export_hf_weights, hf_to_megatron, megatron_to_hf, model_family
from slime_megatron.models.weight_map import Heads, fuse
from slime_megatron.models.weights import split_fused_experts


def checkpoint_state(model) -> dict[str, torch.Tensor]:
    """The model's weights under checkpoint names (what save_pretrained writes)."""
    state = split_fused_experts(model.state_dict(), model.config)
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight")
    return state


def assert_same_tensors(got: dict, expected: dict) -> None:
    assert sorted(got) == sorted(expected)
    different = [name for name in expected if not torch.equal(got[name], expected[name])]
    assert not different, f"not bit-exact: {different}"


def test_hf_to_megatron_to_hf_is_bit_exact(model_type, tiny_hf):
    hf = tiny_hf.model(model_type)
    megatron = hf_to_megatron(hf.state_dict(), hf.config)
    assert_same_tensors(megatron_to_hf(megatron, hf.config), checkpoint_state(hf))


def test_fused_qkv_interleaves_query_groups(tiny_hf):
    """Megatron's layout: per key-value group, its query heads, then its key and value head."""
    config = tiny_hf.config("qwen2")
    h, g, d = 4, 2, 8
    names = [f"model.layers.0.self_attn.{p}_proj.weight" for p in "qkv"]
    q, k, v = (torch.arange(n * d)[:, None].float() + offset for n, offset in ((h, 0), (g, 100), (g, 200)))
    rules = [rule for rule in model_family(config).weight_rules(config) if rule.hf == tuple(names)]
    fused = fuse(rules[0], [q, k, v], Heads.of(config))
    group0 = torch.cat([q[: 2 * d], k[:d], v[:d]])
    assert torch.equal(fused[: 4 * d], group0)
    assert fused.shape == ((h + 2 * g) * d, 1)


# ------------------------------------------------------------------ real megatron models


def _load_run_export(rank, sizes, config, source, tokens):
    """On each rank: build the model, load the weights, compute the full logits, export."""
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

    from slime_megatron.models import build_model, load_hf_weights

    model = build_model(config, sizes).eval()
    load_hf_weights(model, source, config)
    with torch.no_grad():
        positions = torch.arange(tokens.shape[1]).expand_as(tokens)
        logits = gather_from_tensor_model_parallel_region(model(tokens, positions, None))
    return logits, dict(export_hf_weights(model, config))


FAMILIES = ("llama", "qwen2", "qwen3", "qwen3_moe")


def _load_run_export_each(rank, sizes, cases):
    """`_load_run_export` for every (config, source, tokens) case, in one group of ranks; a
    dense model is configured without expert parallelism (the groups exist all the same)."""
    dense = SimpleNamespace(**{**vars(sizes), "expert_model_parallel_size": 1, "expert_tensor_parallel_size": None})
    return [_load_run_export(rank, sizes if getattr(config, "num_experts", None) else dense, config, source, tokens)
            for config, source, tokens in cases]


def test_megatron_logits_equal_transformers_and_export_gives_back_the_weights(model_type, tiny_hf):
    """One process: the weights from an in-memory state dict."""
    hf = tiny_hf.model(model_type)
    tokens = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(tokens).logits
    (logits, exported), = run_in_process(hf, tokens)
    torch.testing.assert_close(logits, expected, atol=2e-5, rtol=1e-4)
    assert_same_tensors(exported, checkpoint_state(hf))


def run_in_process(hf, tokens):
    from slime_megatron.processes import run_on_ranks

    sizes = SimpleNamespace(tensor_model_parallel_size=1, pipeline_model_parallel_size=1, context_parallel_size=1,
                            expert_model_parallel_size=1, expert_tensor_parallel_size=None, seed=1234)
    return run_on_ranks(_load_run_export_each, 1, sizes, [(hf.config, hf.state_dict(), tokens)])[0]


def test_tensor_and_expert_parallel_logits_and_export_equal_transformers(tiny_hf, run_ranks, tmp_path):
    """Every family on 2 gloo ranks at once (one spawn): attention and dense MLPs split over
    tensor-parallel 2, the MoE's experts over expert-parallel 2; weights from a directory."""
    tokens = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(1))
    models = {name: tiny_hf.model(name) for name in FAMILIES}
    cases, expected = [], {}
    for name, hf in models.items():
        hf.save_pretrained(tmp_path / name)
        cases.append((hf.config, str(tmp_path / name), tokens))
        with torch.no_grad():
            expected[name] = hf(tokens).logits
    for per_rank in run_ranks(_load_run_export_each, 2, cases, tp=2, ep=2, etp=1):
        for name, (logits, exported) in zip(models, per_rank):
            torch.testing.assert_close(logits, expected[name], atol=2e-5, rtol=1e-4, msg=name)
            assert_same_tensors(exported, checkpoint_state(models[name]))


def test_unsupported_model_type_is_a_clear_error():
    from transformers import GPT2Config

    with pytest.raises(ValueError, match=r"cannot build model_type 'gpt2'.*supported are llama, qwen2, qwen3, qwen3_moe"):
        model_family(GPT2Config())
