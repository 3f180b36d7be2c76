"""The architectures of issue 22 that megatron-core cannot build for slime, on the FSDP backend
and the CPU engine: Qwen3-Next (gated delta-net linear attention mixed with gated full
attention, MoE) and GLM-5 (``glm_moe_dsa``: MLA with DeepSeek sparse attention, MoE).

The FSDP backend's micro-batches must score each sample as if it ran alone. Padded rows do so
for both; packed rows do for GLM-5 under sdpa (its default there), and cannot for Qwen3-Next,
whose recurrent state runs along the whole row: that configuration is refused when the run is
configured, as is an attention kernel that would ignore GLM-5's sparse top-k.
"""

import json

import pytest
import torch

from slime_core.config import ConfigError
from slime_core.testing import log_probs_alone, make_config, synthetic_rollout_batch
from slime_core.tools.tiny_models import build_tiny_model
from slime_fsdp import inputs
from slime_fsdp.model import load_model


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    """Tiny Qwen3-Next and GLM-5 checkpoints (hidden size 32), by model type."""
    root = tmp_path_factory.mktemp("new-architectures")
    return {family: build_tiny_model(root / family, family, hidden_size=32) for family in ("qwen3_next", "glm_moe_dsa")}


def micro_batch_log_probs(model, micro: inputs.MicroBatch) -> list[torch.Tensor]:
    return inputs.response_log_probs(model(**micro.model_inputs()).logits, micro, temperature=1.0)


@pytest.mark.parametrize("family", ["qwen3_next", "glm_moe_dsa"])
def test_padded_rows_score_each_sample_as_if_alone(models, family):
    """Right padding after each sample: the recurrent state and the sparse-attention indexer
    never reach back from the padding into a sample."""
    model = load_model(str(models[family]))
    batch = synthetic_rollout_batch(num_groups=2, max_response=12, seed=3)
    with torch.no_grad():
        got = micro_batch_log_probs(model, inputs.padded(batch.tokens, batch.response_lengths, "cpu", pad_token_id=0))
        for tokens, response_length, log_probs in zip(batch.tokens, batch.response_lengths, got):
            torch.testing.assert_close(log_probs, log_probs_alone(model, tokens, response_length), rtol=0, atol=1e-5)
    assert len({len(t) for t in batch.tokens}) > 1  # rows of different lengths: padding was there


def test_glm5_trains_with_sdpa_and_its_packed_rows_match_padded_rows(models):
    """GLM-5's default attention on the FSDP backend is sdpa, whose block-causal mask of packed
    rows the indexer honours: packed and padded rows agree."""
    model = load_model(str(models["glm_moe_dsa"]))
    assert model.config._attn_implementation == "sdpa"
    batch = synthetic_rollout_batch(num_groups=2, max_response=12, seed=4)
    with torch.no_grad():
        packed = micro_batch_log_probs(model, inputs.packed(batch.tokens, batch.response_lengths, "cpu", "sdpa"))
        padded = micro_batch_log_probs(
            model, inputs.padded(batch.tokens, batch.response_lengths, "cpu", pad_token_id=0)
        )
    for a, b in zip(packed, padded):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_glm5_indexers_take_no_gradient_and_are_frozen(models):
    """The indexer picks keys by top-k, which passes no gradient: the FSDP backend freezes it,
    so its optimizer keeps no state that a checkpoint would lack."""
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(models["glm_moe_dsa"], attn_implementation="sdpa")
    plain(input_ids=torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]])).logits.sum().backward()
    no_gradient = sorted(name for name, p in plain.named_parameters() if p.grad is None)
    frozen = sorted(
        name for name, p in load_model(str(models["glm_moe_dsa"])).named_parameters() if not p.requires_grad
    )
    assert frozen == no_gradient and all(".indexer." in name for name in frozen) and frozen


def test_a_packed_qwen3_next_row_would_leak_state_and_is_refused_at_config_time(models, tmp_path):
    model = load_model(str(models["qwen3_next"]))
    batch = synthetic_rollout_batch(num_groups=1, max_response=8, seed=5)
    micro = inputs.packed(batch.tokens, batch.response_lengths, "cpu", model.config._attn_implementation)
    # without the sample offsets (transformers, given them, refuses to run the linear attention on a packed row)
    plain = {key: micro.model_inputs()[key] for key in ("input_ids", "position_ids", "attention_mask")}
    with torch.no_grad():
        packed = inputs.response_log_probs(model(**plain).logits, micro, temperature=1.0)
    later = [log_probs_alone(model, t, r) for t, r in zip(batch.tokens[1:], batch.response_lengths[1:])]
    assert (
        max((a - b).abs().max().item() for a, b in zip(packed[1:], later)) > 1e-4
    )  # why it is refused (padded rows: < 1e-5)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    with pytest.raises(
        ConfigError,
        match="--use-dynamic-batch-size packs samples into one row, but .* has "
        "linear-attention layers, whose recurrent state would flow",
    ):
        make_config(
            prompts,
            models["qwen3_next"],
            rollout_batch_size=2,
            train_backend="fsdp",
            use_dynamic_batch_size=True,
            max_tokens_per_gpu=512,
        )
    with pytest.raises(
        ConfigError,
        match="--attn-implementation slime_packed would attend to every key of .*"
        "sparse-attention \\(DSA\\) layers instead of the indexer's top-k; use sdpa",
    ):
        make_config(
            prompts,
            models["glm_moe_dsa"],
            rollout_batch_size=2,
            train_backend="fsdp",
            attn_implementation="slime_packed",
        )


@pytest.mark.integration
def test_qwen3_next_trains_on_fsdp_and_the_cpu_engine_serves_every_pushed_weight(ray_cluster, models, tmp_path):
    """Two GRPO rollouts of Qwen3-Next: the CPU engine generates with the recurrent state of its
    linear-attention layers, FSDP trains on padded rows, and after each push the engine's
    log-probs equal the trainer's."""
    from slime_core.cli.run import run_command
    from slime_core.loop.run_dir import read_metrics
    from slime_core.plugins import Plugins

    data = tmp_path / "addition.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}=", "label": str(a + b)}) + "\n" for a in range(4) for b in range(4))
    )
    flags = [
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(models["qwen3_next"]),
        "--train-backend",
        "fsdp",
        "--rollout-engine",
        "cpu",
        "--rm-type",
        "exact_match",
        "--num-rollout",
        "2",
        "--rollout-batch-size",
        "2",
        "--n-samples-per-prompt",
        "4",
        "--rollout-max-response-len",
        "6",
        "--lr",
        "1e-3",
        "--entropy-coef",
        "0.01",  # a gradient even when every sample gets the same reward
        "--check-weight-update-equal",
        "--save",
        str(tmp_path / "ckpt"),
        "--save-interval",
        "2",
        "--output-dir",
        str(tmp_path / "run"),
    ]
    assert run_command(flags, Plugins()) == 0
    records = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["rollout_id"] >= 0]
    assert [r["weight_version"] for r in records] == [1, 2]
    assert all(r["train/grad_norm"] > 0 for r in records)  # it trained: the second push carries new weights
    assert all(r["weight_update/max_logprob_diff"] < 1e-3 for r in records)
    assert any((tmp_path / "ckpt").iterdir())
