"""The architectures megatron-core cannot build, refused when the run is configured (not when
its ranks start). The families it builds: real runs in tests/test_model_families.py (Qwen3's in
test_megatron_backend.py, Qwen3-MoE's in tests/test_parallel_layouts.py), resumes in test_family_resume.py."""

import json

import pytest

from slime_core.config import ConfigError
from slime_core.testing import make_config
from slime_core.tools.tiny_models import tiny_config


def test_a_checkpoint_megatron_cannot_build_is_refused_when_the_run_is_configured(tmp_path):
    """Qwen3-Next: refused with what megatron-core lacks and the backend that trains it."""
    tiny_config("qwen3_next", hidden_size=32).save_pretrained(tmp_path)
    (tmp_path / "prompts.jsonl").write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    with pytest.raises(
        ConfigError,
        match=f"--hf-checkpoint {tmp_path}: the Megatron backend cannot build model_type "
        "'qwen3_next': megatron-core has no gated delta-net \\(linear attention\\) "
        "layer.*; use --train-backend fsdp, which trains it",
    ):
        make_config(tmp_path / "prompts.jsonl", tmp_path, rollout_batch_size=2, train_backend="megatron")
    assert make_config(tmp_path / "prompts.jsonl", tmp_path, rollout_batch_size=2, train_backend="fsdp")


def test_an_unknown_model_type_is_refused_with_the_supported_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_moee"}))
    (tmp_path / "prompts.jsonl").write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    with pytest.raises(
        ConfigError,
        match="cannot build model_type 'qwen3_moee' \\(did you mean 'qwen3_moe'\\?\\): "
        "supported are deepseek_v3, glm4, glm4_moe, llama",
    ):
        make_config(tmp_path / "prompts.jsonl", tmp_path, rollout_batch_size=2, train_backend="megatron")
