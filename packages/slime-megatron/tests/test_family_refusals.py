"""Architectures that megatron-core 0.16 cannot build for slime are refused when the run is
configured, each naming what megatron-core lacks and the backend that trains it: Qwen3-Next
(gated delta-net) and GLM-5 (``glm_moe_dsa``, DeepSeek sparse attention); and vision-language
models (Qwen2.5-VL, Qwen3-VL, Qwen3.5)."""

import json
import re

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


#: (family, config fields megatron-core cannot build, what the family's mapping says)
ARCHITECTURE_REFUSALS = [
    ("qwen3", dict(attention_bias=True), "qwen3 with attention_bias or mlp_bias is not supported"),
    ("llama", dict(hidden_act="gelu"), "hidden_act 'gelu' is not supported by the Megatron backend"),
    ("qwen3", dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}), "rope .* not supported"),
    ("glm4_moe", dict(norm_topk_prob=False), "glm4_moe with norm_topk_prob false is not supported"),
    ("deepseek_v3", dict(rope_interleave=False), "deepseek_v3 with rope_interleave false is not supported"),
]  # fmt: skip


@pytest.mark.parametrize(
    "family, fields, message", ARCHITECTURE_REFUSALS, ids=[f"{c[0]}-{next(iter(c[1]))}" for c in ARCHITECTURE_REFUSALS]
)
def test_a_supported_family_with_fields_megatron_cannot_build_is_refused_at_config_time(
    tmp_path, family, fields, message
):
    """What a family's mapping refuses when every rank builds the model (`architecture_problem`,
    the same functions) is said when the run is configured."""
    from transformers import AutoConfig

    from slime_megatron.models.transformer_config import architecture_problem

    hf_config = tiny_config(family, hidden_size=32)
    for key, value in fields.items():
        setattr(hf_config, key, value)
    hf_config.save_pretrained(tmp_path)
    (tmp_path / "prompts.jsonl").write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    with pytest.raises(ConfigError, match=f"--hf-checkpoint {tmp_path}: {message}.*use --train-backend fsdp"):
        make_config(tmp_path / "prompts.jsonl", tmp_path, rollout_batch_size=2, train_backend="megatron")
    problem = architecture_problem(AutoConfig.from_pretrained(tmp_path))  # what the rank's model build raises
    assert problem is not None and re.search(message, problem)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl", "qwen3_5", "qwen3_5_moe"])
def test_megatron_refuses_a_vision_language_model_at_config_time_with_the_reason(tmp_path, family):
    from slime_core.tools.tiny_vlms import tiny_vlm_config

    tiny_vlm_config(family).save_pretrained(tmp_path)
    (tmp_path / "prompts.jsonl").write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    with pytest.raises(
        ConfigError,
        match=f"--hf-checkpoint {tmp_path}: {family} is a vision-language model \\(config.json has a vision_config\\); "
        "the Megatron backend builds text-only models .*; use --train-backend fsdp",
    ):
        make_config(tmp_path / "prompts.jsonl", tmp_path, rollout_batch_size=2, train_backend="megatron")


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_5_moe"])
def test_megatron_refuses_qwen3_5_saying_slime_runs_it_on_its_native_megatron_model(tmp_path, family):
    """Qwen3.5 (slime's geo3k_vlm example): the refusal also names its gated delta-net layers and
    where THUDM/slime runs it; the FSDP backend takes it."""
    from slime_core.tools.tiny_vlms import tiny_vlm_config

    tiny_vlm_config(family).save_pretrained(tmp_path)
    (tmp_path / "prompts.jsonl").write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    with pytest.raises(
        ConfigError, match="gated delta-net .*THUDM/slime runs Qwen3.5 on its own native Megatron model"
    ):
        make_config(tmp_path / "prompts.jsonl", tmp_path, rollout_batch_size=2, train_backend="megatron")
    assert make_config(tmp_path / "prompts.jsonl", tmp_path, rollout_batch_size=2, train_backend="fsdp")
