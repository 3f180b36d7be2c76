"""Flags accepted from slime's and Megatron-LM's launch scripts: aliases, architecture checks,
no-effect notes, multi-value pass-through flags."""

import json

import pytest

from slime_core.config import ConfigError, load_config
from slime_core.config.accepted_flags import accepted_flags, no_effect_notes


@pytest.fixture
def base(write_jsonl):
    data = write_jsonl([{"prompt": "1+1=", "label": "2"}])
    return ["--prompt-data", str(data), "--hf-checkpoint", "model", "--rollout-batch-size", "4"]


@pytest.fixture
def model_dir(tmp_path):
    """A model directory whose config.json is all the architecture check reads."""
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen3",
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "rope_theta": 1000000.0,
                "tie_word_embeddings": True,
                "hidden_act": "silu",
            }
        )
    )
    return str(path)


def test_alias_sets_our_option_and_names_itself_as_the_source(options, base):
    config = load_config([*base, "--sglang-server-concurrency", "7"], options)
    assert config.rollout_concurrency == 7
    assert config.sources["rollout_concurrency"] == "--sglang-server-concurrency (command line)"
    assert "server_concurrency" not in config.sglang  # declared, so not passed to SGLang


def test_our_own_option_wins_over_its_alias(options, base):
    config = load_config([*base, "--sglang-server-concurrency", "7", "--rollout-concurrency", "3"], options)
    assert config.rollout_concurrency == 3


def test_no_effect_flags_are_listed_with_their_reason_only_when_given(options, base):
    config = load_config([*base, "--balance-data", "--attention-backend", "flash", "--spec", "mod", "fn"], options)
    notes = no_effect_notes(config)
    assert any(n.startswith("--balance-data: accepted, no effect here: train data is always split") for n in notes)
    assert any(n.startswith("--attention-backend: accepted, no effect here:") for n in notes)
    assert config.spec == ["mod", "fn"] and any(n.startswith("--spec:") for n in notes)
    assert not any(n.startswith("--num-epoch") for n in notes)


def test_architecture_flag_matching_the_checkpoint_passes(options, base, model_dir):
    config = load_config(
        [*base, "--hf-checkpoint", model_dir, "--num-layers", "2", "--rotary-base", "1e6", "--swiglu"], options
    )
    assert config.num_layers == 2


def test_architecture_mismatch_is_an_error_naming_both_values(options, base, model_dir):
    with pytest.raises(ConfigError) as info:
        load_config(
            [
                *base,
                "--hf-checkpoint",
                model_dir,
                "--num-layers",
                "36",
                "--hidden-size",
                "64",
                "--untie-embeddings-and-output-weights",
            ],
            options,
        )
    errors = info.value.errors
    assert len(errors) == 2
    assert "--num-layers 36 says num_hidden_layers = 36, but it is 2" in errors[0] and model_dir in errors[0]
    assert "--untie-embeddings-and-output-weights says tie_word_embeddings = False, but it is True" in errors[1]


def test_architecture_is_not_checked_against_a_missing_checkpoint(options, base):
    config = load_config([*base, "--num-layers", "36"], options)  # "model" does not exist
    assert config.num_layers == 36


def test_pass_through_flag_takes_several_values_then_the_config_file(options, base, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("lr: 2.0e-6\n")
    config = load_config([*base, "--sglang-cuda-graph-bs", "1", "2", "4", str(path)], options)
    assert config.sglang["cuda_graph_bs"] == ["1", "2", "4"]
    assert config.lr == 2e-6
    config = load_config([*base, "--sglang-mem-fraction-static", "0.7", "--router-foo"], options)
    assert config.sglang["mem_fraction_static"] == "0.7" and config.router_args["foo"] is True


def test_lone_eval_prompt_data_is_named_aime_as_in_slime(options, base, write_jsonl):
    path = str(write_jsonl([{"prompt": "2+2=", "label": "4"}], name="aime.jsonl"))
    config = load_config([*base, "--eval-prompt-data", path], options)
    assert config.eval_prompt_data == ["aime", path]


def test_debug_train_only_needs_replayed_rollouts_only_with_the_default_rollout_function(options, base):
    with pytest.raises(ConfigError, match="--debug-train-only starts no engines"):
        load_config([*base, "--debug-train-only"], options)
    config = load_config([*base, "--debug-train-only", "--rollout-function", "sft"], options)
    assert config.debug_train_only


def test_every_accepted_flag_says_what_it_does(options):
    for key, entry in accepted_flags().items():
        assert key in options
        assert entry.alias or entry.hf_keys or entry.reason, entry.flag
        assert entry.alias is None or entry.alias in options, entry.flag


def test_context_len_bounds_the_prompt_len_as_in_slime(options, base):
    config = load_config([*base, "--rollout-max-context-len", "512"], options)
    assert config.rollout_max_prompt_len == 511
    assert config.sources["rollout_max_prompt_len"] == "--rollout-max-context-len 512 minus 1"
    assert (
        load_config(
            [*base, "--rollout-max-context-len", "512", "--rollout-max-prompt-len", "100"], options
        ).rollout_max_prompt_len
        == 100
    )
    with pytest.raises(ConfigError, match="at most 511"):
        load_config([*base, "--rollout-max-context-len", "512", "--rollout-max-prompt-len", "512"], options)


def test_delta_weight_sync_is_refused_where_slime_refuses_it(options, base):
    delta = [*base, "--update-weight-mode", "delta"]
    with pytest.raises(ConfigError) as info:
        load_config([*delta, "--update-weight-transport", "tensor", "--colocate"], options)
    for problem in ("needs --update-weight-transport disk, not tensor", "needs --update-weight-local-checkpoint-dir"):
        assert problem in str(info.value)
    assert "--colocate" in str(info.value)
    config = load_config([*delta, "--update-weight-local-checkpoint-dir", "/local/copy"], options)
    assert (config.update_weight_delta_encoding, config.update_weight_delta_checksum) == ("xor", "xxh3-128")
