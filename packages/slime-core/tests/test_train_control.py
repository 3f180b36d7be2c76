"""The training-control and profiling options' parts, on the real components: which parameters
the name patterns train, a reset AdamW's next step, when the reference follows the actor, the
config checks and no-effect warnings, and the profilers of a CPU rank. `slime run` with them,
on both backends: tests/test_slime_train_control.py."""

import gzip
import importlib.util
import json

import pytest
import torch

from slime_core.config import ConfigError, load_config
from slime_core.config.no_effect import no_effect_warnings
from slime_core.rank.optimizer_state import reset_optimizer_states
from slime_core.rank.profiler import MemoryRecorder, TrainProfiler
from slime_core.rank.step import ref_update_due
from slime_core.rank.trainable import freeze_by_name, trainable


@pytest.fixture
def base(write_jsonl):
    data = str(write_jsonl([{"prompt": "1+1=", "label": "2"}]))
    return ["--prompt-data", data, "--hf-checkpoint", "m", "--rollout-batch-size", "4"]


def test_patterns_are_searched_only_train_first_then_freeze():
    only, freeze = ["experts", r"layers\.1\."], [r"layers\.1\.mlp\.linear_fc2"]
    assert trainable("decoder.layers.0.mlp.experts.linear_fc1.weight", only, freeze)  # searched, not matched
    assert trainable("decoder.layers.1.self_attention.linear_qkv.weight", only, freeze)
    assert not trainable("decoder.layers.1.mlp.linear_fc2.weight", only, freeze)  # kept by only, then frozen
    assert not trainable("embedding.word_embeddings.weight", only, freeze)
    assert trainable("embedding.word_embeddings.weight", None, ["output_layer"])
    assert trainable("anything", None, None)


def test_freezing_by_name_turns_off_gradients_and_refuses_a_model_left_with_nothing(base, options):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    config = load_config([*base, "--freeze-params-name-list", r"^0\."], options)
    assert freeze_by_name(model.named_parameters(), config) == ["0.weight", "0.bias"]
    assert [p.requires_grad for p in model.parameters()] == [False, False, True, True]
    everything = load_config([*base, "--only-train-params-name-list", "nothing"], options)
    assert freeze_by_name(torch.nn.Linear(2, 2).named_parameters(), everything, whole_model=False) == [
        "weight",
        "bias",
    ]  # one pipeline stage may train nothing
    with pytest.raises(ValueError, match="leave no parameter to train.*names such as weight, bias"):
        freeze_by_name(torch.nn.Linear(2, 2).named_parameters(), everything)


def test_a_reset_adamw_takes_adam_s_first_step_again():
    torch.manual_seed(0)
    param = torch.nn.Parameter(torch.randn(64))
    optimizer = torch.optim.AdamW([param], lr=0.1, weight_decay=0.0)
    for _ in range(2):
        param.grad = torch.randn(64)
        optimizer.step()
    reset_optimizer_states([optimizer])
    assert all(not value.any() for value in optimizer.state[param].values())
    before, param.grad = param.detach().clone(), torch.randn(64)
    optimizer.step()
    torch.testing.assert_close(param.detach() - before, -0.1 * param.grad.sign(), rtol=1e-5, atol=1e-6)


def test_the_reference_follows_the_actor_after_every_interval_th_rollout(base, options):
    every_two = load_config([*base, "--ref-update-interval", "2", "--use-kl-loss"], options)
    assert [ref_update_due(every_two, rollout) for rollout in range(4)] == [False, True, False, True]
    assert not ref_update_due(load_config(base, options), 0)


def test_config_checks_and_no_effect_warnings(base, options):
    errors = _errors(
        [
            *base,
            "--freeze-params-name-list",
            "(unclosed",
            "--use-pytorch-profiler",
            "--profile-target",
            "train_overall",
            "train_actor",
            "--profile-step-start",
            "3",
            "--profile-step-end",
            "3",
        ],
        options,
    )
    assert any("'(unclosed' is not a Python regex" in e for e in errors)
    assert any("torch runs one profiler at a time" in e for e in errors)
    assert any("--profile-step-end (3) must be above --profile-step-start (3)" in e for e in errors)
    with pytest.raises(ConfigError, match="'train_everything' is not one of train_overall"):
        load_config([*base, "--profile-target", "train_everything"], options)
    given = ["--num-critic-only-steps", "2", "--ref-update-interval", "1", "--profile-step-start", "1"]
    warned = [line.split()[0] for line in no_effect_warnings(load_config([*base, *given], options), options)]
    assert {"--num-critic-only-steps", "--ref-update-interval", "--profile-step-start"} <= set(warned)
    snapshot = load_config([*base, "--memory-snapshot-num-steps", "2"], options)
    assert "--memory-snapshot-num-steps" in [line.split()[0] for line in no_effect_warnings(snapshot, options)]


@pytest.mark.skipif(importlib.util.find_spec("memray") is not None, reason="memray is installed")
def test_memray_without_memray_installed_is_refused(base, options):
    errors = _errors([*base, "--record-memory-history", "--memory-recorder", "memray"], options)
    assert any("pip install 'slime-core[memray]'" in e for e in errors) and any(
        "--memory-snapshot-num-steps N" in e for e in errors
    )


def test_a_cpu_rank_traces_its_phases_and_says_the_torch_memory_recorder_records_nothing(
    base, options, tmp_path, capsys
):
    argv = [*base, "--output-dir", str(tmp_path), "--use-pytorch-profiler", "--profile-step-start", "0"]
    profiler = TrainProfiler(load_config([*argv, "--profile-target", "train_log_probs"], options), 3, _CPU)
    for _ in range(2):  # two log-prob passes of one micro-batch each: a trace each
        profiler.begin("train_log_probs")
        torch.randn(8, 8) @ torch.randn(8, 8)
        profiler.tick("train_log_probs")
        profiler.end("train_log_probs")
    profiler.begin("train_actor")  # not targeted: nothing
    traces = sorted((tmp_path / "tensorboard").glob("*.pt.trace.json.gz"))
    assert [p.name.split(".")[0] for p in traces] == ["train_log_probs_rank_3"] * 2
    events = json.loads(gzip.decompress(traces[0].read_bytes()))["traceEvents"]
    assert any(event.get("name") == "aten::mm" for event in events)
    config = load_config([*base, "--output-dir", str(tmp_path), "--record-memory-history"], options)
    recorder = MemoryRecorder(config, "rank0", _CPU)
    recorder.start()
    recorder.stop()
    assert "records CUDA allocations, and this train rank runs on the CPU" in capsys.readouterr().err
    assert not recorder.path.exists() and recorder.path.parent == tmp_path


_CPU = torch.device("cpu")


def _errors(argv, options) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(argv, options)
    return info.value.errors
