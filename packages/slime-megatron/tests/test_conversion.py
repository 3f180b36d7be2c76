"""HF ⇄ Megatron conversion for every built-in family: bit-exact round trips in memory and
through real tensor-/expert-parallel megatron models, and logits equal to transformers'; the
families megatron-core cannot build are refused naming what it lacks."""

from types import SimpleNamespace

import pytest
import torch

from slime_core.tools.tiny_models import TINY_SHAPES, tiny_config
from slime_megatron.models import export_hf_weights, hf_to_megatron, megatron_to_hf, model_family
from slime_megatron.models.weight_map import Heads, fuse
from slime_megatron.models.weights import split_fused_experts

#: Every released shape of the families megatron-core builds (slime-core's tiny models, as
#: `slime tiny-model --family NAME` writes them; variants too: Qwen2.5 tied, Qwen3 untied).
SHAPES = tuple(name for name, shape in TINY_SHAPES.items() if shape.model_type not in ("qwen3_next", "glm_moe_dsa"))


def family_model(name: str):
    """A tiny float32 transformers model of the released shape ``name``, its norms, biases and
    routers' correction biases randomised (a converter that mixes them up fails)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config(name, hidden_size=32), attn_implementation="eager").eval()
    with torch.no_grad():
        for param_name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            if "norm" in param_name:
                tensor.uniform_(0.5, 1.5)
            elif "e_score_correction_bias" in param_name or param_name.endswith(".bias"):
                tensor.uniform_(-0.3, 0.3)
    return model


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


@pytest.mark.parametrize("family", SHAPES)
def test_hf_to_megatron_to_hf_is_bit_exact(family):
    hf = family_model(family)
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


def _load_run_export(rank, sizes, config, source, tokens, out=None):
    """On each rank: build the model, load the weights, compute the full logits, export; with
    ``out``, also save the model as a Megatron checkpoint there (what `slime convert
    hf-to-megatron` writes)."""
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

    from slime_megatron.checkpoint import save_checkpoint
    from slime_megatron.models import build_model, load_hf_weights

    model = build_model(config, sizes).eval()
    load_hf_weights(model, source, config)
    with torch.no_grad():
        positions = torch.arange(tokens.shape[1]).expand_as(tokens)
        logits = gather_from_tensor_model_parallel_region(model(tokens, positions, None))
    if out is not None:
        save_checkpoint(out, 0, model)
    return logits, dict(export_hf_weights(model, config))


def _load_run_export_each(rank, sizes, cases):
    """`_load_run_export` for every (config, source, tokens[, out]) case, in one group of ranks;
    a dense model is configured without expert parallelism (the groups exist all the same)."""
    dense = SimpleNamespace(**{**vars(sizes), "expert_model_parallel_size": 1, "expert_tensor_parallel_size": None})
    return [_load_run_export(rank, sizes if _is_moe(case[0]) else dense, *case) for case in cases]


def _is_moe(config) -> bool:
    return bool(getattr(config, "num_experts", None) or getattr(config, "n_routed_experts", None))


@pytest.mark.parametrize("family", SHAPES)
def test_megatron_logits_equal_transformers_and_export_gives_back_the_weights(family):
    """One process: the weights from an in-memory state dict."""
    hf = family_model(family)
    tokens = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(tokens).logits
    ((logits, exported),) = run_in_process(hf, tokens)
    torch.testing.assert_close(logits, expected, atol=2e-5, rtol=1e-4)
    assert_same_tensors(exported, checkpoint_state(hf))


def run_in_process(hf, tokens):
    from slime_megatron.processes import run_on_ranks

    sizes = SimpleNamespace(
        tensor_model_parallel_size=1,
        pipeline_model_parallel_size=1,
        context_parallel_size=1,
        expert_model_parallel_size=1,
        expert_tensor_parallel_size=None,
        seed=1234,
    )
    return run_on_ranks(_load_run_export_each, 1, sizes, [(hf.config, hf.state_dict(), tokens)])[0]


def test_tensor_and_expert_parallel_logits_and_export_equal_transformers(run_ranks, tmp_path):
    """Every released shape on 2 gloo ranks at once (one spawn): attention and dense MLPs split
    over tensor-parallel 2, the MoE's experts over expert-parallel 2; weights from a directory.
    The Megatron checkpoint the ranks save reads back (`slime convert megatron-to-hf`'s reader)
    as the Hugging Face tensors, bit for bit."""
    from slime_megatron.torch_dist import read_hf_weights

    tokens = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(1))
    models = {name: family_model(name) for name in SHAPES}
    cases, expected = [], {}
    for name, hf in models.items():
        hf.save_pretrained(tmp_path / name)
        cases.append((hf.config, str(tmp_path / name), tokens, str(tmp_path / f"{name}-megatron")))
        with torch.no_grad():
            expected[name] = hf(tokens).logits
    for per_rank in run_ranks(_load_run_export_each, 2, cases, tp=2, ep=2, etp=1):
        for name, (logits, exported) in zip(models, per_rank):
            torch.testing.assert_close(logits, expected[name], atol=2e-5, rtol=1e-4, msg=name)
            assert_same_tensors(exported, checkpoint_state(models[name]))
    for name, hf in models.items():
        assert_same_tensors(
            read_hf_weights(tmp_path / f"{name}-megatron" / "iter_0000000", hf.config), checkpoint_state(hf)
        )


def test_unsupported_model_type_is_a_clear_error():
    from transformers import GPT2Config

    supported = "deepseek_v3, glm4, glm4_moe, llama, qwen2, qwen3, qwen3_moe"
    with pytest.raises(
        ValueError, match=rf"cannot build model_type 'gpt2'.*supported are {supported}; use --train-backend fsdp"
    ):
        model_family(GPT2Config())


def test_a_family_megatron_core_cannot_build_names_what_it_lacks():
    with pytest.raises(
        ValueError,
        match="cannot build model_type 'qwen3_next': megatron-core has no gated delta-net "
        r"\(linear attention\) layer.*; use --train-backend fsdp, which trains it",
    ):
        model_family(tiny_config("qwen3_next", hidden_size=32))


def test_deepseek_style_routing_and_attention_become_megatrons():
    """The router's fields as megatron-core names them, by hand from the tiny configs: sigmoid
    scores with the correction bias (kept as loaded), groups only where there are several,
    shared experts of n_shared_experts × moe_intermediate_size, dense first layers."""
    from slime_megatron.models.transformer_config import transformer_config

    sizes = SimpleNamespace(tensor_model_parallel_size=1)
    glm, deepseek = (transformer_config(family_model(name).config, sizes) for name in ("glm4_moe", "deepseek_v3"))
    for tc in (glm, deepseek):
        assert tc.moe_router_score_function == "sigmoid"
        assert (tc.moe_router_enable_expert_bias, tc.moe_router_bias_update_rate) == (True, 0.0)
        assert (tc.num_moe_experts, tc.moe_router_topk, tc.moe_layer_freq) == (4, 2, [0, 1])
        assert tc.moe_shared_expert_intermediate_size == 16
    assert (glm.moe_router_num_groups, glm.moe_router_topk_scaling_factor) == (None, 2.5)
    assert (glm.add_qkv_bias, glm.qk_layernorm, glm.kv_channels) == (True, True, 16)  # 4 heads of 16: 2 x hidden
    assert (deepseek.moe_router_num_groups, deepseek.moe_router_group_topk) == (2, 1)
    assert deepseek.moe_router_topk_scaling_factor == 2.5
    assert (deepseek.multi_latent_attention, deepseek.q_lora_rank, deepseek.kv_lora_rank) == (True, 16, 16)
    assert (deepseek.rope_type, deepseek.rotary_scaling_factor, deepseek.original_max_position_embeddings) == (
        "yarn",
        40.0,
        4096,
    )
    assert (deepseek.mscale, deepseek.mscale_all_dim, deepseek.beta_fast, deepseek.beta_slow) == (1.0, 1.0, 32.0, 1.0)


def test_a_router_megatron_core_ranks_differently_is_refused():
    """DeepSeek-V3 ranks expert groups by their best two experts; megatron by their best
    top_k // topk_group: with top-4 of one group out of 2 they differ."""
    from slime_megatron.models.transformer_config import transformer_config

    config = family_model("deepseek_v3").config
    config.num_experts_per_tok = 4
    with pytest.raises(ValueError, match="ranks expert groups by their best num_experts_per_tok // topk_group = 4"):
        transformer_config(config, SimpleNamespace(tensor_model_parallel_size=1))
