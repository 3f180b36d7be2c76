"""slime's training-control and profiling flags act through `slime run` on both train backends:

- ``--only-train-params-name-list layers`` with ``--freeze-params-name-list``, matched in the
  backend's own parameter names: FSDP ``layers\\.0\\.`` trains the second decoder layer alone,
  Megatron ``mlp`` trains the attention of every layer (its pre-MLP norm is part of
  ``mlp.linear_fc1``): the embeddings, the final norm and the frozen parts keep their loaded
  values bit for bit, the trained ones move;
- ``--reset-optimizer-states``: every rollout's update is Adam's first step, ``lr * sign(g)``
  per element, also on the second rollout the actor trains on (without it, the moments of the
  first would bend it);
- ``--ref-update-interval 1`` (with ``--use-kl-loss``): after a trained rollout the reference
  is the actor, so the next rollout's KL to it is 0 although the actor has moved;
- ``--num-critic-only-steps 1`` (PPO): the first rollout trains the critic alone, the actor's
  weights stay as loaded and it reports no train metrics;
- ``--use-rollout-entropy``: the old log-prob pass also gives π_old's entropy, logged as its mean
  over the response tokens (``train/rollout_entropy``, slime's rollout/entropy), between 0 and
  log(vocabulary) -- although one step per rollout would otherwise skip that pass -- and the
  reference's pass the reference's (``train/rollout_ref_entropy``), the same while the reference
  is the actor (before the first update; then after each, by ``--ref-update-interval 1``);
- ``--use-pytorch-profiler --profile-target ...``: a trace per targeted phase in
  <output-dir>/tensorboard, holding the ops that ran (FSDP: a rollout's training and the
  log-prob passes; Megatron: the whole run, a step per rollout).

The weights are read from the ``--save-hf`` directory written after each rollout.
"""

import gzip
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LR = 5e-3
FLAGS = (
    "--only-train-params-name-list",
    "layers",
    "--reset-optimizer-states",
    "--use-kl-loss",
    "--kl-loss-coef",
    "0.01",
    "--ref-update-interval",
    "1",
    "--use-rollout-entropy",
    "--use-pytorch-profiler",
    "--profile-step-start",
    "0",
    "--profile-step-end",
    "2",
    "--lr",
    str(LR),
    "--num-steps-per-rollout",
    "1",
    "--rollout-batch-size",
    "4",
    "--n-samples-per-prompt",
    "4",
    "--rollout-max-response-len",
    "6",
    "--save-interval",
    "1",
)


def test_fsdp_ppo_run_trains_the_critic_alone_first_then_a_subset_with_fresh_adam_and_a_moving_reference(
    slime_run, tiny_model_dir
):
    records = _run(
        slime_run,
        "fsdp",
        3,
        "--advantage-estimator",
        "ppo",
        "--num-critic-only-steps",
        "1",
        "--profile-target",
        "train_actor",
        "train_log_probs",
        "--freeze-params-name-list",
        r"layers\.0\.",
    )
    weights = _weights(slime_run.tmp_path, 3)
    initial = _initial(tiny_model_dir)
    # --num-critic-only-steps 1: rollout 0 trains the critic alone
    assert "critic/value_loss" in records[0] and "train/loss" not in records[0]
    assert all(torch.equal(weights[0][name], initial[name]) for name in initial)
    assert all("train/loss" in record for record in records[1:])
    trained = [name for name in initial if name.startswith("model.layers.1.")]
    _check_trained_subset_fresh_adam_and_reference(records, weights, initial, trained, first_trained=1)
    _check_traces(slime_run.tmp_path / "run" / "tensorboard", ["train_actor_rank_0", "train_log_probs_rank_0"])


def test_megatron_run_trains_a_subset_with_fresh_adam_and_a_moving_reference(slime_run, tiny_model_dir):
    records = _run(slime_run, "megatron", 2, "--profile-target", "train_overall", "--freeze-params-name-list", "mlp")
    initial = _initial(tiny_model_dir)
    attention = ("self_attn", "input_layernorm")
    trained = [name for name in initial if name.startswith("model.layers.") and any(a in name for a in attention)]
    _check_trained_subset_fresh_adam_and_reference(
        records, _weights(slime_run.tmp_path, 2), initial, trained, first_trained=0
    )
    _check_traces(slime_run.tmp_path / "run" / "tensorboard", ["train_overall_rank_0"])


def _run(slime_run, backend: str, rollouts: int, *flags: str) -> list[dict]:
    save = slime_run.tmp_path / "save"
    records = slime_run(
        *FLAGS,
        "--train-backend",
        backend,
        "--num-rollout",
        str(rollouts),
        "--save",
        str(save),
        "--save-hf",
        str(slime_run.tmp_path / "hf"),
        *flags,
    )
    assert len(records) == rollouts
    return records


def _check_trained_subset_fresh_adam_and_reference(records, weights, initial, trained, first_trained: int) -> None:
    vocab = initial["model.embed_tokens.weight"].shape[0]
    for record in records[first_trained:]:
        assert 0 < record["train/rollout_entropy"] <= math.log(vocab)
        assert record["train/rollout_ref_entropy"] == pytest.approx(record["train/rollout_entropy"], abs=1e-6)
    last, before = weights[-1], weights[first_trained - 1] if first_trained else initial
    frozen = [name for name in initial if name not in trained]
    assert trained and "model.embed_tokens.weight" in frozen and "model.layers.0.mlp.up_proj.weight" in frozen
    assert all(torch.equal(last[name], initial[name]) for name in frozen)
    assert all(not torch.equal(weights[first_trained][name], before[name]) for name in trained)
    # --reset-optimizer-states: the last rollout's update is Adam's first step, lr per element
    steps = torch.cat([(last[name] - weights[-2][name]).abs().flatten() for name in trained])
    assert ((steps / LR - 1).abs() < 1e-2).float().mean() > 0.95, steps.quantile(torch.tensor([0.1, 0.5, 0.9]))
    # --ref-update-interval 1: the reference followed the actor, which has moved since it was loaded
    assert records[-1]["train/kl_loss"] == pytest.approx(0.0, abs=1e-7)
    assert any(not torch.equal(weights[-2][name], initial[name]) for name in trained)


def _check_traces(directory: Path, workers: list[str]) -> None:
    for worker in workers:
        traces = sorted(directory.glob(f"{worker}.*.pt.trace.json.gz"))
        assert traces, f"no {worker} trace in {sorted(p.name for p in directory.iterdir())}"
        events = json.loads(gzip.decompress(traces[0].read_bytes()))["traceEvents"]
        assert any(event.get("name", "").startswith("aten::") for event in events), worker


def _weights(tmp_path: Path, rollouts: int) -> list[dict[str, torch.Tensor]]:
    """The actor's weights after each rollout, as --save-hf wrote them."""
    return [_read(tmp_path / "hf" / f"iter_{rollout:07d}") for rollout in range(rollouts)]


def _initial(model_dir) -> dict[str, torch.Tensor]:
    return _read(Path(model_dir))


def _read(directory: Path) -> dict[str, torch.Tensor]:
    return {name: t for path in sorted(directory.glob("*.safetensors")) for name, t in load_file(path).items()}
