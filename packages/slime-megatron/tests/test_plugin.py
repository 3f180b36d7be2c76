import json

import pytest

from slime_core.config import ConfigError, OptionSet
from slime_core.plugins import Plugins
from slime_core.testing import check_plugin_installed, make_config


def test_found_through_its_entry_point_and_light_to_import():
    described = check_plugin_installed("megatron", "slime-megatron")
    assert {"slime_add_options", "slime_validate_config", "slime_register_train_backends", "slime_add_commands"} <= set(
        described["hooks"]
    )


def test_the_megatron_options_show_in_slime_run_help_under_their_group():
    options = OptionSet()
    Plugins().add_options(options)
    help_text = options.help_parser("slime run").format_help()
    assert "Megatron backend (slime-megatron):" in help_text
    for flag in (
        "--tensor-model-parallel-size",
        "--pipeline-model-parallel-size",
        "--context-parallel-size",
        "--expert-model-parallel-size",
        "--expert-tensor-parallel-size",
        "--sequence-parallel",
        "--recompute-granularity",
        "--recompute-method",
        "--recompute-num-layers",
        "--use-distributed-optimizer",
        "--megatron-config",
    ):
        assert options[flag[2:].replace("-", "_")].plugin == "megatron", flag
        assert flag in help_text


def test_the_megatron_backend_is_registered():
    entry = Plugins().registry("train_backends").entry("megatron")
    assert entry.target == "slime_megatron.rank:MegatronTrainRank"


@pytest.fixture
def megatron_run(tmp_path, tiny_model_dir):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")

    def build(**overrides):
        return make_config(prompts, tiny_model_dir, rollout_batch_size=2, train_backend="megatron", **overrides)

    return build


def test_parallel_sizes_must_divide_the_training_ranks(megatron_run, tiny_moe_model_dir, tmp_path):
    with pytest.raises(ConfigError) as error:
        megatron_run(actor_num_gpus_per_node=4, tensor_model_parallel_size=3, expert_model_parallel_size=8)
    assert "--tensor-model-parallel-size 3 does not divide the 4 training ranks" in str(error.value)
    assert "--expert-model-parallel-size 8 does not divide the 4 training ranks" in str(error.value)
    # expert parallelism needs a MoE model, and MoE layers over tensor-parallel ranks sequence parallelism
    # (`slime_megatron.layout`; test_layout_refusals.py)
    sizes = dict(tensor_model_parallel_size=2, expert_model_parallel_size=2, sequence_parallel=True)
    prompts = tmp_path / "prompts.jsonl"  # the fixture's
    config = make_config(
        prompts, tiny_moe_model_dir, rollout_batch_size=4, train_backend="megatron", actor_num_gpus_per_node=4, **sizes
    )
    assert config.tensor_model_parallel_size == 2


def test_lora_is_refused_at_config_time_with_the_backend_that_has_it(megatron_run):
    """megatron-core has no adapter layers: ``--lora-rank`` is an error, not a run that trains every weight."""
    with pytest.raises(ConfigError) as error:
        megatron_run(lora_rank=8)
    assert "--lora-rank: the Megatron backend has no LoRA" in str(error.value)
    assert "--train-backend fsdp" in str(error.value)
    assert megatron_run(lora_rank=0).lora_rank == 0


def test_megatron_config_is_checked_against_transformer_config(megatron_run):
    with pytest.raises(ConfigError) as error:
        megatron_run(megatron_config=["attention_sofmax_in_fp32=true", "moe_router_topk=two", "noequals"])
    message = str(error.value)
    assert (
        "'attention_sofmax_in_fp32' is not a field of megatron's TransformerConfig; did you mean "
        "'attention_softmax_in_fp32'?" in message
    )
    assert "'moe_router_topk=two': expected int" in message
    assert "'noequals': write KEY=VALUE" in message
    from slime_megatron.models.transformer_config import parse_megatron_config

    assert parse_megatron_config(["attention_softmax_in_fp32=false", "moe_router_topk=4", "init_method_std=0.01"]) == {
        "attention_softmax_in_fp32": False,
        "moe_router_topk": 4,
        "init_method_std": 0.01,
    }


def test_full_recomputation_needs_a_method_and_a_layer_count_and_sequence_parallel_is_accepted(megatron_run):
    with pytest.raises(ConfigError) as error:
        megatron_run(recompute_granularity="full")
    assert "--recompute-granularity full needs --recompute-method" in str(error.value)
    config = megatron_run(actor_num_gpus_per_node=2, tensor_model_parallel_size=2, sequence_parallel=True)
    assert config.sequence_parallel


def test_ppo_on_megatron_is_refused_at_config_time(tmp_path, tiny_model_dir, capsys):
    """This backend registers no critic, so PPO stops when the config is checked, before Ray
    or any rank starts, and says which backend has one."""
    from slime_core.cli.run import run_command

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    argv = [
        "--prompt-data",
        str(prompts),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--train-backend",
        "megatron",
        "--advantage-estimator",
        "ppo",
        "--rollout-batch-size",
        "2",
        "--num-rollout",
        "1",
        "--rollout-engine",
        "cpu",
        "--output-dir",
        str(tmp_path / "run"),
    ]
    assert run_command(argv, Plugins()) == 2
    assert (
        "--advantage-estimator ppo needs a critic, and train backend 'megatron' provides none"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "run").exists()


def test_context_parallelism_is_refused_at_config_time_where_a_rank_could_not_split_the_attention(
    megatron_run, tmp_path, tiny_model_dir
):
    """CP 2 is accepted for the models the backend builds; what would make a rank fall back to
    megatron's local attention (which asserts CP 1) or run MTP layers on split rows is refused
    when the config is checked, with the fix (a checkpoint's attention dropout: test_layout_refusals.py);
    with FSDP the flag is refused, not ignored."""
    cp2 = dict(actor_num_gpus_per_node=2, context_parallel_size=2)
    assert megatron_run(**cp2).context_parallel_size == 2
    with pytest.raises(ConfigError) as error:
        megatron_run(**cp2, megatron_config=["attention_dropout=0.1", "apply_query_key_layer_scaling=true"])
    message = str(error.value)
    for key in ("attention_dropout", "apply_query_key_layer_scaling"):
        assert f"--context-parallel-size 2 with --megatron-config {key}=" in message
        assert f"use --context-parallel-size 1, or drop {key}" in message
    with pytest.raises(ConfigError, match="--context-parallel-size 2 with --mtp-num-layers"):
        megatron_run(**cp2, mtp_num_layers=1)
    prompts = tmp_path / "prompts.jsonl"
    with pytest.raises(ConfigError, match="--context-parallel-size 2 splits each sequence with Megatron, which"):
        make_config(prompts, tiny_model_dir, rollout_batch_size=2, train_backend="fsdp", **cp2)
