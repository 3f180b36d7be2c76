"""The DeepSeek-style families on the Megatron backend in a real run, and the architectures
megatron-core cannot build refused when the run is configured (not when its ranks start)."""

import json

import pytest
import torch

from slime_core.config import ConfigError
from slime_core.testing import make_config
from slime_core.tiny_models import build_char_tokenizer, tiny_config


def save_tiny(model_dir, family: str, **overrides):
    """A tiny ``family`` model saved with the character tokenizer; routers' correction biases
    randomised, so an engine and a trainer that disagree on them route differently."""
    from transformers import AutoModelForCausalLM

    config = tiny_config(family, hidden_size=32)
    for key, value in overrides.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.uniform_(-0.3, 0.3)
    model.save_pretrained(model_dir)
    build_char_tokenizer(model_dir)
    return model_dir


@pytest.mark.integration
def test_a_glm4_moe_grpo_run_on_megatron_pushes_every_weight_into_the_cpu_engine(ray_cluster, tmp_path):
    """GLM-4.5's architecture (sigmoid router with correction bias, shared experts, a dense first
    layer, partial rotary, q/k norm, q/k/v biases) trains with Megatron, and after each push the
    CPU engine's log-probs equal the trainer's."""
    from slime_core.cli.run import run_command
    from slime_core.loop.run_dir import read_metrics
    from slime_core.plugins import Plugins

    model = save_tiny(tmp_path / "model", "glm4_moe", attention_bias=True)
    data = tmp_path / "addition.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "label": str(a + b)}) + "\n"
                            for a in range(4) for b in range(4)))
    flags = ["--prompt-data", str(data), "--hf-checkpoint", str(model), "--train-backend", "megatron",
             "--rollout-engine", "cpu", "--rm-type", "exact_match", "--num-rollout", "2", "--rollout-batch-size", "2",
             "--n-samples-per-prompt", "4", "--rollout-max-response-len", "4", "--lr", "1e-3",
             "--entropy-coef", "0.01",  # a gradient even when every sample gets the same reward
             "--check-weight-update-equal", "--output-dir", str(tmp_path / "run")]
    assert run_command(flags, Plugins()) == 0
    records = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["rollout_id"] >= 0]
    assert [r["weight_version"] for r in records] == [1, 2]
    assert all(r["train/grad_norm"] > 0 for r in records)  # it trained: the second push carries new weights
    assert all(r["weight_update/max_logprob_diff"] < 1e-3 for r in records)


def test_a_checkpoint_megatron_cannot_build_is_refused_when_the_run_is_configured(tmp_path):
    """Qwen3-Next: refused with what megatron-core lacks and the backend that trains it."""
    tiny_config("qwen3_next", hidden_size=32).save_pretrained(tmp_path)
    (tmp_path / "prompts.jsonl").write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    with pytest.raises(ConfigError, match=f"--hf-checkpoint {tmp_path}: the Megatron backend cannot build model_type "
                                          "'qwen3_next': megatron-core has no gated delta-net \\(linear attention\\) "
                                          "layer.*; use --train-backend fsdp, which trains it"):
        make_config(tmp_path / "prompts.jsonl", tmp_path, rollout_batch_size=2, train_backend="megatron")
    assert make_config(tmp_path / "prompts.jsonl", tmp_path, rollout_batch_size=2, train_backend="fsdp")


def test_an_unknown_model_type_is_refused_with_the_supported_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_moee"}))
    (tmp_path / "prompts.jsonl").write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    with pytest.raises(ConfigError, match="cannot build model_type 'qwen3_moee' \\(did you mean 'qwen3_moe'\\?\\): "
                                          "supported are deepseek_v3, glm4, glm4_moe, llama"):
        make_config(tmp_path / "prompts.jsonl", tmp_path, rollout_batch_size=2, train_backend="megatron")
