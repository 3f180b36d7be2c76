"""Architectures that megatron-core 0.16 cannot build for slime are refused when the run is
configured, each naming what megatron-core lacks and the backend that trains it: Qwen3-Next
(gated delta-net) and GLM-5 (``glm_moe_dsa``, DeepSeek sparse attention)."""

import json

import pytest

from slime_core.config import ConfigError
from slime_core.testing import make_config
from slime_core.tools.tiny_models import tiny_config

WHAT_IS_MISSING = {
    "qwen3_next": "its experimental GatedDeltaNet, experimental_attention_variant 'gated_delta_net', needs that "
    "Triton/CUDA package",
    "glm_moe_dsa": "sparse attention \\(experimental_attention_variant 'dsa'\\) is DeepSeek-V3.2's, not GLM-5's: "
    "its indexer always applies a Hadamard rotation",
}


@pytest.mark.parametrize("model_type", sorted(WHAT_IS_MISSING))
def test_megatron_refuses_the_family_at_config_time_and_fsdp_takes_it(tmp_path, model_type):
    tiny_config(model_type, hidden_size=32).save_pretrained(tmp_path)
    (tmp_path / "prompts.jsonl").write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    with pytest.raises(
        ConfigError,
        match=f"--hf-checkpoint {tmp_path}: the Megatron backend cannot build model_type "
        f"'{model_type}': .*{WHAT_IS_MISSING[model_type]}.*; use --train-backend fsdp",
    ):
        make_config(tmp_path / "prompts.jsonl", tmp_path, rollout_batch_size=2, train_backend="megatron")
    assert make_config(tmp_path / "prompts.jsonl", tmp_path, rollout_batch_size=2, train_backend="fsdp")
