"""slime's launch flags with slime's meaning: ``--megatron-config-path`` (the per-role Megatron
YAML of slime's PPO launches) and Megatron-LM's ``--use-rope-scaling`` (slime's Llama-3.1 model
script)."""

import json

import pytest

from slime_core.config import ConfigError

#: as slime's PPO CI launch writes it (YAML reads 1e-5 as a string)
PPO_MEGATRON_CONFIG = """
megatron:
  - name: default
    role: critic
    overrides:
      lr: 1e-5
  - name: default
    role: actor
    overrides:
      lr: 1e-6
      num_nodes: 4
"""


def test_the_roles_overrides_set_the_actor_s_options_and_the_critic_s_own(make_config, tmp_path):
    path = tmp_path / "megatron.yaml"
    path.write_text(PPO_MEGATRON_CONFIG)
    config, _ = make_config("--megatron-config-path", str(path), "--lr", "3e-6", "--advantage-estimator", "ppo")
    assert config.lr == 1e-6 and config.critic_lr == 1e-5  # the file wins over the command line, as in slime
    assert config.sources["critic_lr"] == f"--megatron-config-path {path} (critic overrides 'lr')"


@pytest.mark.parametrize(
    "text, hint",
    [
        ("critic: {lr: 1}", "needs a top-level 'megatron' list"),
        ("megatron: [{role: actor}, {role: actor}]", "more than one entry with role actor"),
        ("megatron: [{role: reward}]", "a role is actor or critic"),
        ("megatron: [{role: actor, overrides: {no_such_setting: 1}}]", "the actor's 'no_such_setting' is no option"),
        ("megatron: [{role: critic, overrides: {weight_decay: 0.5}}]", "shares the actor's --weight-decay"),
    ],
)
def test_a_file_that_cannot_be_used_is_a_config_error_naming_the_setting(make_config, tmp_path, text, hint):
    path = tmp_path / "megatron.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=hint):
        make_config("--megatron-config-path", str(path))


@pytest.mark.parametrize(
    "model, error",
    [
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, None),  # Llama 3.1's config.json
        ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0}}, None),  # as transformers 5 writes it
        ({"rope_parameters": {"rope_type": "default"}}, "--use-rope-scaling says rope_type = 'llama3'"),
    ],
)
def test_use_rope_scaling_is_checked_against_the_model_s_rope(make_config, tmp_path, model, error):
    checkpoint = tmp_path / "model"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "llama", **model}))
    flags = ("--use-rope-scaling", "--hf-checkpoint", str(checkpoint))
    if error is None:
        assert make_config(*flags)[0].use_rope_scaling is True
    else:
        with pytest.raises(ConfigError, match=error):
            make_config(*flags)
