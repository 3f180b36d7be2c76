"""Every layout the Megatron train ranks refuse is refused by ``slime run --dry-run`` first.

Each case is a tiny model (the tiny Qwen3 or Qwen3-MoE with one size changed in its
config.json) and the parallel sizes that break one rule of `slime_megatron.layout`. The dry
run (in this process, as a user types it) must exit with the rule's message, and the rank's
guard (`check_layout`, called on the transformers config the rank loads) must raise the same
message: one function, two callers. A new refusal of the ranks is one more line in `CASES`.
"""

import json
import shutil
from types import SimpleNamespace

import pytest

from slime_core.cli.run import run_command
from slime_core.plugins import Plugins
from slime_megatron.layout import check_layout, check_teacher_vocab

THREE_LAYERS = {"num_hidden_layers": 3, "layer_types": ["full_attention"] * 3}

#: (id, family, config.json changes, parallel options, the message both places give)
CASES = [
    ("heads", "qwen3", {"num_attention_heads": 6, "num_key_value_heads": 6}, {"tensor_model_parallel_size": 4},
     "--tensor-model-parallel-size 4 does not divide the 6 attention heads"),
    ("query-groups", "qwen3", {"num_key_value_heads": 1}, {"tensor_model_parallel_size": 2},
     "--tensor-model-parallel-size 2 does not divide the 1 key/value heads"),
    ("vocab", "qwen3", {"vocab_size": 101}, {"tensor_model_parallel_size": 2},
     "--tensor-model-parallel-size 2 does not divide the 101 vocabulary rows"),
    ("mlp-width", "qwen3", {"intermediate_size": 99}, {"tensor_model_parallel_size": 2},
     "--tensor-model-parallel-size 2 does not divide the 99 dense MLP width"),
    ("layers-per-stage", "qwen3", THREE_LAYERS, {"pipeline_model_parallel_size": 2},
     "--pipeline-model-parallel-size 2 does not divide the 3 decoder layers"),
    ("layers-per-stage-with-tp", "qwen3", THREE_LAYERS,
     {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2},
     "--pipeline-model-parallel-size 2 does not divide the 3 decoder layers"),
    ("experts-of-a-dense-model", "qwen3", {}, {"expert_model_parallel_size": 2},
     "--expert-model-parallel-size 2 splits the experts of a MoE model"),
    ("experts", "qwen3_moe", {"num_local_experts": 3}, {"expert_model_parallel_size": 2},
     "--expert-model-parallel-size 2 does not divide the 3 routed experts"),
    ("expert-width", "qwen3_moe", {"moe_intermediate_size": 15},
     {"tensor_model_parallel_size": 2, "sequence_parallel": True},
     "--expert-tensor-parallel-size 2 does not divide the 15 expert MLP width"),
    ("moe-tp-without-sp", "qwen3_moe", {}, {"tensor_model_parallel_size": 2},
     "MoE layers over tensor-parallel ranks only with sequence parallelism; add --sequence-parallel"),
]  # fmt: skip


@pytest.fixture
def dry_run(tmp_path, capsys):
    """``dry_run(model_dir, ranks, options) -> (exit status, stderr)`` of ``slime run --dry-run``
    training ``model_dir`` with Megatron on ``ranks`` ranks and the given Megatron options."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")

    def run(model_dir, ranks: int, options: dict, *extra: str) -> tuple[int, str]:
        flags = [
            f"--{key.replace('_', '-')}" + ("" if value is True else f" {value}") for key, value in options.items()
        ]
        argv = ["--dry-run", "--train-backend", "megatron", "--prompt-data", str(prompts)]
        argv += ["--hf-checkpoint", str(model_dir), "--rollout-batch-size", "4", "--rollout-engine", "cpu"]
        argv += ["--actor-num-gpus-per-node", str(ranks), *" ".join(flags).split(), *extra]
        capsys.readouterr()
        status = run_command(argv, Plugins())
        return status, capsys.readouterr().err

    return run


def _edited(source, target, changes: dict):
    """A copy of the model directory ``source`` whose config.json has ``changes``."""
    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, **changes}))
    return target


def _ranks(options: dict) -> int:
    """The smallest rank count every parallel size divides (their product: all are 1 or 2, or alone)."""
    count = 1
    for key, value in options.items():
        if key.endswith("_size"):
            count *= value
    return count


@pytest.mark.parametrize("family, changes, options, message", [case[1:] for case in CASES], ids=[c[0] for c in CASES])
def test_the_dry_run_refuses_what_the_rank_would(
    family, changes, options, message, dry_run, tiny_model_dir, tiny_moe_model_dir, tmp_path
):
    from transformers import AutoConfig

    model_dir = _edited(tiny_moe_model_dir if family == "qwen3_moe" else tiny_model_dir, tmp_path / "model", changes)
    status, err = dry_run(model_dir, _ranks(options), options)
    assert status == 2 and message in err, err
    with pytest.raises(ValueError) as refused:  # the rank's guard, on the config it loads
        check_layout(AutoConfig.from_pretrained(model_dir), SimpleNamespace(**options), f"--hf-checkpoint {model_dir}")
    assert message in str(refused.value)


def test_the_same_model_and_layout_without_the_broken_rule_dry_run(dry_run, tiny_moe_model_dir):
    """The rules refuse only what breaks them: EP 2 × TP 2 with sequence parallelism on the tiny MoE passes."""
    options = {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 2, "sequence_parallel": True}
    status, err = dry_run(tiny_moe_model_dir, 4, options)
    assert status == 0, err


def test_context_parallelism_dry_runs_and_attention_it_cannot_split_is_refused(dry_run, tiny_model_dir, tmp_path):
    """CP 2 passes the dry run (the ranks split sequences); a checkpoint whose attention has
    dropout (which megatron's local attention, refusing CP, would compute) is refused first."""
    options = {"context_parallel_size": 2}
    status, err = dry_run(tiny_model_dir, 2, options)
    assert status == 0, err
    dropout = _edited(tiny_model_dir, tmp_path / "dropout", {"attention_dropout": 0.1})
    status, err = dry_run(dropout, 2, options)
    assert status == 2 and "has attention_dropout 0.1, which runs only without context parallelism" in err, err


def test_a_teacher_of_another_vocabulary_is_refused_by_the_dry_run_and_the_rank(dry_run, tiny_model_dir, tmp_path):
    teacher = _edited(tiny_model_dir, tmp_path / "teacher", {"vocab_size": 128})
    status, err = dry_run(tiny_model_dir, 1, {}, "--opd-teacher-load", str(teacher), "--use-opd")
    message = f"--opd-teacher-load {teacher} has a vocabulary of 128, the policy 100"
    assert status == 2 and message in err, err
    with pytest.raises(ValueError, match="has a vocabulary of 128, the policy 100"):
        check_teacher_vocab(100, 128, str(teacher))


def test_fewer_prompt_groups_than_model_replicas_are_refused_by_the_dry_run_and_the_driver(
    dry_run, tiny_model_dir, tiny_moe_model_dir
):
    """The driver gives each model replica (data-parallel rank) whole prompt groups: on EP 2 ×
    TP 2's 4 ranks, 2 replicas (expert parallelism splits experts, not samples), 2 groups feed
    them and 1 stops the first train step; TP 2 × PP 2's 4 ranks are one replica, fed by 1 group."""
    from slime_core.rollout_batch import groups_per_rank_problem

    options = {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 2, "sequence_parallel": True}
    status, err = dry_run(tiny_moe_model_dir, 4, options, "--rollout-batch-size", "2")
    assert status == 0, err
    status, err = dry_run(tiny_moe_model_dir, 4, options, "--rollout-batch-size", "1")
    message = "1 prompt groups cannot feed 2 data-parallel ranks (a group stays on one rank)"
    assert status == 2 and f"--rollout-batch-size 1: {message}" in err, err
    assert message in groups_per_rank_problem(1, 2)  # what `dp_rank_indices` raises on a rollout
    options = {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2}
    status, err = dry_run(tiny_model_dir, 4, options, "--rollout-batch-size", "1")
    assert status == 0, err


def test_name_patterns_that_freeze_a_parameter_in_some_layers_only_are_refused_before_a_save():
    """megatron-core checkpoints a parameter of every layer as one tensor (its optimizer state
    too): a layer frozen by --freeze-params-name-list leaves a hole that its save refuses."""
    import torch

    from slime_megatron.trainable import check_layers_frozen_alike

    def named(*trained):
        return [
            (f"decoder.layers.{i}.mlp.linear_fc1.weight", torch.nn.Parameter(torch.zeros(1), requires_grad=t))
            for i, t in enumerate(trained)
        ]

    check_layers_frozen_alike(named(False, False))  # frozen in every layer: fine
    with pytest.raises(ValueError, match=r"freeze decoder\.layers\.\*\.mlp\.linear_fc1\.weight in some layers"):
        check_layers_frozen_alike(named(False, True))
