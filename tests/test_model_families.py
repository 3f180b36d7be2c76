"""The model families slime's users train (GLM-4, GLM-4.5+ MoE, DeepSeek-V3 with MLA), end to
end with the FSDP backend and the CPU engine: tiny models of the real architectures (`slime
tiny-model --family`), a GRPO rollout that trains, a weight push after which the engine's
log-probs equal the trainer's, a checkpoint, and a resume from it. Qwen3-Next's linear-attention
layers are not served by the CPU engine yet: it says so when it loads one."""

import json

import pytest

from slime_core.tiny_models import build_tiny_model

pytestmark = pytest.mark.integration

NEW_FAMILIES = ["glm4", "glm4_moe", "deepseek_v3"]


@pytest.mark.parametrize("family", NEW_FAMILIES)
def test_a_family_trains_pushes_its_weights_saves_and_resumes(slime_run, tmp_path, family):
    model = build_tiny_model(tmp_path / "model", family, hidden_size=32)
    flags = ("--hf-checkpoint", str(model), "--train-backend", "fsdp", "--check-weight-update-equal",
             "--rollout-batch-size", "2", "--n-samples-per-prompt", "4", "--rollout-max-response-len", "4",
             "--save", str(tmp_path / "ckpt"), "--save-interval", "1")
    first = slime_run("--num-rollout", "1", *flags, output="first")
    resumed = slime_run("--num-rollout", "2", "--load", str(tmp_path / "ckpt"), *flags, output="resumed")
    assert [r["rollout_id"] for r in first + resumed] == [0, 1]
    for record in first + resumed:
        assert record["train/grad_norm"] > 0  # it trained
        assert record["weight_update/max_logprob_diff"] < 1e-3  # the engine took every weight
    config = json.loads((model / "config.json").read_text())
    assert config["model_type"] == family


def test_the_cpu_engine_refuses_a_linear_attention_model_when_it_loads(tmp_path):
    from slime_sglang.cpu_engine.weights import load_model

    model = build_tiny_model(tmp_path / "model", "qwen3_next", hidden_size=32)
    with pytest.raises(ValueError, match="linear_attention layers, whose recurrent state"):
        load_model(str(model))
