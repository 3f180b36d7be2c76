"""Faults: non-finite values and failing rewards. The faults in training and in the weights are
injected on the route a run takes (`slime run`'s command in this process, on the test session's
Ray: train ranks as Ray actors, a CPU engine behind the real sglang-router, weights pushed every
rollout, a checkpoint after each rollout); the reward faults, which the driver and its rollout
handle before any backend sees a reward, on the same command with the test kit's fake backends.

What the user gets, per fault:

- a reward function returns NaN: exit 1, the message names the function and its plugin, the
  sample (group/index, run-wide index) and its prompt's file:line, and the value; the
  checkpoint before it is whole and a run resumes from it;
- the same with ``--drop-nonfinite-rewards`` (and a reward that raises for one sample): the
  run finishes; the samples' groups are left out and counted;
- a reward function that raises for every sample: exit 1, naming the function, its plugin, the
  error and the sample with its prompt's file:line;
- NaN advantages (a plugin's estimator), so a NaN loss and gradient: each such step is skipped
  on every rank (data-parallel FSDP, tensor-parallel Megatron), counted in metrics.jsonl and the
  progress line; after ``--max-consecutive-skipped-steps`` in a row the run stops with exit 1;
  the checkpoints written are of finite weights;
- the same with ``--no-check-for-nan-in-loss-and-grad`` (THUDM slime's answer to NaN
  gradients): the steps are skipped and counted, and the run finishes;
- a weight made NaN outside an optimizer step (a Megatron hook here): the weights are refused
  before they reach the engines (exit 1), so no engine and no checkpoint holds them.
"""

import json
import math
from pathlib import Path

import pytest

from slime_core.cli.run import run_command
from slime_core.loop.run_dir import read_metrics
from slime_core.plugins import Plugins
from slime_core.testing import run_on_fakes

pytestmark = pytest.mark.integration

PLUGIN = '''
"""Rewards and an advantage estimator that go wrong from rollout 1 on (the "armed" file in the
run directory, written before rollout 1 starts); what they did is written beside it."""
import json
import os
from pathlib import Path

from slime_core import hookimpl


def _run_dir(config):
    return Path(config.output_dir)


def _first(config, name):
    """True once per run for ``name`` (an exclusive file create: reward calls run in threads)."""
    try:
        os.close(os.open(_run_dir(config) / name, os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        return False


def _armed(config):
    return (_run_dir(config) / "armed").exists()


def _digits(sample):
    return sum(ch.isdigit() for ch in sample.response) / max(len(sample.response), 1)


def _note(config, name, sample):
    where = {"group": sample.group_index, "index": sample.index, "global": sample.global_index}
    (_run_dir(config) / name).write_text(json.dumps({**where, "source": sample.metadata["source"]}))


def nan_once(sample, config):
    if _armed(config) and sample.index == 1 and _first(config, "nan_given"):
        _note(config, "nan_sample.json", sample)
        return float("nan")
    return _digits(sample)


def nan_once_and_raise_once(sample, config):
    if _armed(config) and sample.index == 2 and _first(config, "raised"):
        raise ValueError("grader crashed")
    return nan_once(sample, config)


def raises_when_armed(sample, config):
    if _armed(config):
        _note(config, "raised_sample.json", sample)
        raise ValueError("grader crashed")
    return _digits(sample)


def nan_weight_when_armed(config, rollout_id, step, model_chunks, optimizer):
    """A --megatron-before-train-step-hook that writes a NaN into a weight from rollout 1 on."""
    import torch

    if _armed(config):
        with torch.no_grad():
            next(model_chunks[0].parameters()).view(-1)[0] = float("nan")


def nan_advantages_when_armed(inputs):
    from slime_core.algorithms.advantages import grpo_advantages

    advantages, returns = grpo_advantages(inputs)
    if _armed(inputs.run_config):
        return advantages * float("nan"), returns
    return advantages, returns


@hookimpl
def slime_register_reward_functions(register):
    for fn in (nan_once, nan_once_and_raise_once, raises_when_armed, _digits_reward):
        register(fn.__name__, fn)


def _digits_reward(sample, config):
    return _digits(sample)


@hookimpl
def slime_register_advantage_estimators(register):
    register("nan_advantages_when_armed", nan_advantages_when_armed)


@hookimpl
def slime_before_rollout(rollout_id, config):
    if rollout_id == 1:
        (_run_dir(config) / "armed").touch()
'''


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    """The faults plugin as a local module (``-p nonfinite_faults``): the train ranks load it too."""
    folder = tmp_path_factory.mktemp("plugin")
    (folder / "nonfinite_faults.py").write_text(PLUGIN)
    return folder


def faults_runner(launch, data_dir, tiny_model_dir, plugin_dir, monkeypatch, capsys, route=()):
    """``run(*flags, output=...)``: ``launch(argv)`` (``slime run``'s exit code) with the faults plugin on
    16 addition prompts, two groups of four per rollout, a checkpoint after every rollout, and
    the ``route`` flags; returns the exit code, what it printed to stderr, and the run directory."""
    monkeypatch.syspath_prepend(str(plugin_dir))
    data = data_dir / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+1=", "label": str(a + 1)}) + "\n" for a in range(16)))
    base = [
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tiny_model_dir),
        *route,
        "--rollout-batch-size",
        "2",
        "--n-samples-per-prompt",
        "4",
        "--rollout-max-response-len",
        "4",
        "--lr",
        "1e-3",
        "--save-interval",
        "1",
        "--save",
        str(data_dir / "ckpt"),
    ]

    def run(*flags, output="run"):
        capsys.readouterr()
        code = launch([*base, "--output-dir", str(data_dir / output), *flags])
        return code, capsys.readouterr().err, data_dir / output

    run.data, run.ckpt = data, data_dir / "ckpt"
    return run


@pytest.fixture
def slime(ray_cluster, tiny_model_dir, plugin_dir, tmp_path, monkeypatch, capsys):
    """`faults_runner` on the route a run takes: ``slime run``'s command in this process, on the
    session's Ray, with a CPU engine (for faults in training and in the weights)."""
    return faults_runner(
        lambda argv: run_command(argv, Plugins(["nonfinite_faults"])),
        tmp_path,
        tiny_model_dir,
        plugin_dir,
        monkeypatch,
        capsys,
        route=("--rollout-engine", "cpu"),
    )


@pytest.fixture
def slime_on_fakes(tiny_model_dir, plugin_dir, tmp_path, monkeypatch, capsys):
    """`faults_runner` on the test kit's fake backends (`slime_core.testing.run_on_fakes`), in this
    process without Ray: for the reward faults, which the driver and its rollout handle alone."""
    return faults_runner(
        lambda argv: run_on_fakes(argv, modules=["nonfinite_faults"]),
        tmp_path,
        tiny_model_dir,
        plugin_dir,
        monkeypatch,
        capsys,
    )


def saved_rollouts(ckpt: Path) -> list[int]:
    """The rollouts whose data-source state and trainer checkpoint were both written."""
    states = {int(p.stem[5:]) for p in (ckpt / "rollout_state").glob("iter_*.json")}
    return sorted(r for r in states if (ckpt / f"iter_{r:07d}").is_dir())


def test_a_nan_reward_stops_the_run_naming_the_function_the_sample_its_prompt_and_the_value(slime_on_fakes):
    code, err, run_dir = slime_on_fakes("--num-rollout", "3", "--rm-type", "nan_once")
    nan = json.loads((run_dir / "nan_sample.json").read_text())
    assert code == 1, err[-2000:]
    message = (
        f"reward function 'nan_once' (plugin 'nonfinite_faults', local module) returned nan for sample "
        f"{nan['group']}/1 (#{nan['global']}) of the prompt at {nan['source']}"
    )
    assert message in err and "--drop-nonfinite-rewards" in err
    assert nan["source"].startswith(f"{slime_on_fakes.data}:")  # the prompt's own line of the data file
    assert "Traceback" not in err
    assert message in (run_dir / "slime.log").read_text()
    assert json.loads((run_dir / "status.json").read_text())["status"] == "failed"
    assert [r["rollout_id"] for r in read_metrics(run_dir / "metrics.jsonl")] == [0]
    assert saved_rollouts(slime_on_fakes.ckpt) == [0]  # rollout 1 saved nothing; rollout 0's checkpoint is whole:
    code, err, resumed = slime_on_fakes(
        "--num-rollout", "2", "--rm-type", "_digits_reward", "--load", str(slime_on_fakes.ckpt), output="resumed"
    )
    assert code == 0, err[-2000:]
    assert [r["rollout_id"] for r in read_metrics(resumed / "metrics.jsonl")] == [1]


def test_dropped_nan_and_failed_rewards_leave_their_groups_out_counted(slime_on_fakes, caplog):
    """A NaN reward with --drop-nonfinite-rewards, and a reward call that raises, for one
    sample each: the groups are left out and replaced, the run finishes and counts them; a
    warning (on stderr in a terminal) names each sample."""
    code, err, run_dir = slime_on_fakes(
        "--num-rollout", "2", "--rm-type", "nan_once_and_raise_once", "--drop-nonfinite-rewards"
    )
    assert code == 0, err[-2000:]
    first, second = read_metrics(run_dir / "metrics.jsonl")
    assert first["reward/non_finite"] == 0 and first["reward/failed"] == 0
    assert second["reward/non_finite"] == 1 and second["reward/failed"] == 1
    assert 1 <= second["rollout/groups_failed_reward"] <= 2  # the two samples may share a group
    assert math.isfinite(second["rollout/reward_mean"]) and math.isfinite(second["train/loss"])
    assert "dropped 1 non-finite rewards so far" in (run_dir / "slime.log").read_text()
    function = "reward function 'nan_once_and_raise_once' (plugin 'nonfinite_faults', local module)"
    assert f"{function} raised ValueError: grader crashed on sample " in caplog.text
    assert (
        f"{function} returned nan for sample " in caplog.text and "; dropped (--drop-nonfinite-rewards)" in caplog.text
    )
    assert caplog.text.count(f"of the prompt at {slime_on_fakes.data}:") == 2


def test_a_reward_that_always_raises_stops_the_run_naming_it_and_the_sample(slime_on_fakes):
    code, err, run_dir = slime_on_fakes(
        "--num-rollout", "3", "--rm-type", "raises_when_armed", "--dynamic-sampling-max-groups", "2"
    )
    assert code == 1, err[-2000:]
    assert (
        "had a sample whose reward failed, the last: reward function 'raises_when_armed' (plugin "
        "'nonfinite_faults', local module) raised ValueError: grader crashed on sample " in err
    )
    assert f"of the prompt at {slime_on_fakes.data}:" in err and "--rm-failure-reward" in err
    assert "Traceback" not in err.split("grader crashed on sample")[-1]  # the message ends it, no traceback
    assert saved_rollouts(slime_on_fakes.ckpt) == [0]


@pytest.mark.parametrize(
    "backend",
    [
        ("--train-backend", "fsdp", "--actor-num-gpus-per-node", "2"),
        ("--train-backend", "megatron", "--actor-num-gpus-per-node", "2", "--tensor-model-parallel-size", "2"),
        # bf16's mixed-precision optimizer; no checkpoint: Megatron's bf16 optimizer state fails to save on CPU today
        ("--train-backend", "megatron", "--bf16", "--save-interval", "0"),
    ],
    ids=["fsdp-dp2", "megatron-tp2", "megatron-bf16"],
)
def test_nan_loss_steps_are_skipped_on_every_rank_and_stop_the_run_after_too_many(slime, backend):
    """NaN advantages from rollout 1 on: rollouts 1 and 2 skip their step (on both ranks, which
    would otherwise hang or diverge), the weights pushed after rollout 1 pass the engines'
    guard, and the second skip in a row stops the run."""
    code, err, run_dir = slime(
        "--num-rollout",
        "5",
        "--rm-type",
        "_digits_reward",
        "--advantage-estimator",
        "nan_advantages_when_armed",
        "--max-consecutive-skipped-steps",
        "2",
        *backend,
    )
    assert code == 1, err[-2000:]
    assert "rollout 2, step 0: 2 optimizer steps in a row had a non-finite loss or gradient norm" in err
    assert "--max-consecutive-skipped-steps" in err
    first, second = read_metrics(run_dir / "metrics.jsonl")
    assert first["train/skipped_steps"] == 0 and math.isfinite(first["train/loss"])
    assert second["train/skipped_steps"] == 1 and second["train/skipped_steps_in_a_row"] == 1
    assert second["weight_update/bytes"] > 0  # the skipped step's (finite) weights reached the engine
    log = (run_dir / "slime.log").read_text()
    assert "SKIPPED 1 non-finite steps (1 in a row)" in log and "2 optimizer steps in a row" in log
    assert saved_rollouts(slime.ckpt) == ([] if "--bf16" in backend else [0, 1])


def test_without_the_check_nan_loss_steps_are_skipped_counted_and_the_run_goes_on(slime):
    code, err, run_dir = slime(
        "--num-rollout",
        "3",
        "--rm-type",
        "_digits_reward",
        "--advantage-estimator",
        "nan_advantages_when_armed",
        "--max-consecutive-skipped-steps",
        "1",
        "--no-check-for-nan-in-loss-and-grad",
    )
    assert code == 0, err[-2000:]
    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["train/skipped_steps"] for r in records] == [0, 1, 1]
    assert records[-1]["train/skipped_steps_total"] == 2 and records[-1]["train/skipped_steps_in_a_row"] == 2
    assert saved_rollouts(slime.ckpt) == [0, 1, 2]  # each of finite weights (the guard let them through)


def test_weights_made_nan_outside_a_step_never_reach_the_engines_or_a_checkpoint(slime):
    code, err, run_dir = slime(
        "--num-rollout",
        "3",
        "--rm-type",
        "_digits_reward",
        "--train-backend",
        "megatron",
        "--megatron-before-train-step-hook",
        "nonfinite_faults:nan_weight_when_armed",
    )
    assert code == 1, err[-2000:]
    assert (
        "refusing to push weight version 2 to the engines: 1 of the trainer's parameters hold NaN or infinite "
        "values (module.embedding.word_embeddings.weight)" in err
    )
    assert [r["rollout_id"] for r in read_metrics(run_dir / "metrics.jsonl")] == [0]
    assert saved_rollouts(slime.ckpt) == [0]


def _weights(group) -> dict:
    return {name: tensor.clone() for bucket in group.export_weights(1 << 24) for name, tensor in bucket}


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["fsdp", "megatron"])
def test_on_a_gpu_in_bf16_a_nan_step_is_skipped_without_moving_a_weight(backend, tmp_path):
    """On CUDA (nccl and gloo groups, bf16 weights with float32 master copies, one rank in this
    process): a rollout whose rewards hold a NaN skips its step, no weight moves and none turns
    non-finite (the weights' check on CUDA tensors), and the next rollout trains."""
    import torch

    from slime_core.testing import destroy_default_group, make_config, synthetic_rollout_batch
    from slime_core.tools.tiny_models import build_tiny_model
    from slime_core.train_backend import TrainGroup

    if backend == "fsdp":
        from slime_fsdp.rank import FSDPTrainRank as rank_class

        teardown = destroy_default_group
    else:
        from slime_megatron.parallel import destroy_parallel as teardown
        from slime_megatron.rank import MegatronTrainRank as rank_class
    model_dir = build_tiny_model(tmp_path / "model", "qwen3", hidden_size=128, max_positions=512)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    nan_batch = synthetic_rollout_batch(seed=1)
    nan_batch.rewards[0] = math.nan  # its group's advantages, the loss and the gradient are NaN
    config = make_config(
        prompts, model_dir, train_backend=backend, bf16=True, rollout_batch_size=4, n_samples_per_prompt=4, lr=1e-3
    )
    try:
        group = TrainGroup(rank_class, config, 1, in_process=True)
        group.init()
        assert torch.cuda.memory_allocated() > 0
        before = _weights(group)
        metrics = group.train(0, nan_batch)
        moved = [name for name, tensor in _weights(group).items() if not torch.equal(before[name], tensor)]
        assert metrics["skipped_steps"] == 1 and moved == [] and group.call("nonfinite_weights") == [[]]
        metrics = group.train(1, synthetic_rollout_batch(seed=2))
        moved = [name for name, tensor in _weights(group).items() if not torch.equal(before[name], tensor)]
        assert metrics["skipped_steps"] == 0 and math.isfinite(metrics["loss"]) and moved
        assert group.call("nonfinite_weights") == [[]]
    finally:
        teardown()
