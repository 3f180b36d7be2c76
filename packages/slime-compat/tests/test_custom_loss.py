"""slime's ``--custom-loss-function-path`` (``--loss-type custom_loss``) on a real train rank
(FSDP, Megatron) in this process: a slime-style loss (below, named by dotted path as in a launch script)
that re-implements the on-policy policy gradient from the logits must give the loss, gradient
norm and updated weights of our built-in loss on the same batch; in a real ``slime run`` on either
backend, a slime-style loss that takes the per-token log-probs and entropy as slime's policy loss
does (`slime.backends.megatron_utils.loss.get_log_probs_and_entropy`) gets π_old's and the
entropy the run logs for ``--use-rollout-entropy``; and the config checks."""

import json
import os
from pathlib import Path

import pytest
import torch

from slime_core.config import ConfigError

HERE = "test_custom_loss."


# ------------------------------------------------------------ slime-style user function


def pg_from_logits(args, batch, logits, sum_of_sample_mean):
    """-A·π/π_old per response token (the PPO surrogate, unclipped), each sample's masked mean,
    with log π read from the packed logits at the rollout temperature."""
    assert logits.shape[:2] == (1, sum(batch["total_lengths"])) and logits.dtype == torch.float32
    assert batch["tokens"].shape == logits.shape[:2]
    assert batch["values"] is None and batch["returns"] is None and batch["teacher_log_probs"] is None  # as slime's
    log_probs, start = [], 0
    for tokens, total, response in zip(batch["unconcat_tokens"], batch["total_lengths"], batch["response_lengths"]):
        rows = logits[0, start + total - response - 1 : start + total - 1] / args.rollout_temperature
        log_probs.append(rows.log_softmax(-1).gather(-1, tokens[-response:, None]).squeeze(-1))
        start += total
    ratio = torch.exp(torch.cat(log_probs) - torch.cat(batch["log_probs"]))
    loss = sum_of_sample_mean(-torch.cat(batch["advantages"]) * ratio)
    return loss, {"loss": loss.detach(), "pg_loss": loss.detach()}


def grpo_recording_entropy(args, rollout_data):
    """``--custom-advantage-function-path``: the reward on every token (GRPO's advantages, as
    ``rewards`` come group-normalised); records ``rollout_data["entropy"]`` (the old log-prob
    pass's, with ``--use-rollout-entropy``) in <output-dir>/advantage_entropy.jsonl."""
    entropy = rollout_data["entropy"]
    with open(Path(args.output_dir) / "advantage_entropy.jsonl", "a") as f:
        record = {"entropy": [e.tolist() for e in entropy], "response_lengths": rollout_data["response_lengths"]}
        f.write(json.dumps({**record, "has_ref_entropy": "ref_entropy" in rollout_data}) + "\n")
    lengths = rollout_data["response_lengths"]
    rollout_data["advantages"] = [torch.full((n,), float(r)) for r, n in zip(rollout_data["rewards"], lengths)]
    rollout_data["returns"] = rollout_data["advantages"]


def pg_with_entropy(args, batch, logits, sum_of_sample_mean):
    """The policy gradient with slime's entropy bonus, from what slime's
    ``get_log_probs_and_entropy`` gives; records each sample's entropy and the largest gap between
    its log-probs and π_old's in <output-dir>/custom_loss_calls.jsonl."""
    from slime.backends.megatron_utils.loss import get_log_probs_and_entropy

    _, scored = get_log_probs_and_entropy(
        logits,
        args=args,
        unconcat_tokens=batch["unconcat_tokens"],
        total_lengths=batch["total_lengths"],
        response_lengths=batch["response_lengths"],
        with_entropy=True,
    )
    log_probs, entropy = torch.cat(scored["log_probs"]), torch.cat(scored["entropy"])
    with open(Path(args.output_dir) / "custom_loss_calls.jsonl", "a") as f:
        call = {
            "response_lengths": batch["response_lengths"],
            "entropy": [e.tolist() for e in scored["entropy"]],
            "log_prob_gap": float((log_probs - torch.cat(batch["log_probs"])).abs().max()),
        }
        f.write(json.dumps(call) + "\n")
    pg_loss = sum_of_sample_mean(-torch.cat(batch["advantages"]) * torch.exp(log_probs - torch.cat(batch["log_probs"])))
    entropy_loss = sum_of_sample_mean(entropy)
    loss = pg_loss - args.entropy_coef * entropy_loss
    return loss, {"loss": loss.detach(), "pg_loss": pg_loss.detach(), "entropy_loss": entropy_loss.detach()}


# ------------------------------------------------------------ through a real rank


def _train_one_step(config, batch) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """One optimizer step of a fresh single rank of ``config.train_backend`` in this process:
    its metrics and updated weights."""
    from slime_core.cluster.ports import free_port

    if config.train_backend == "fsdp":
        from torch.distributed import destroy_process_group as close

        from slime_fsdp.rank import FSDPTrainRank as Rank
    else:
        from slime_megatron.parallel import destroy_parallel as close
        from slime_megatron.rank import MegatronTrainRank as Rank
    rank = Rank(config, 0, 1, "127.0.0.1", free_port())
    try:
        rank.init()
        rank.start_train(0, batch)
        metrics = rank.train_step(0)
        rank.finish_train()
        full = lambda p: p.full_tensor() if hasattr(p, "full_tensor") else p  # noqa: E731  (FSDP's DTensors)
        return metrics, {name: full(p).detach().clone() for name, p in rank.model.named_parameters()}
    finally:
        close()


@pytest.mark.parametrize(
    "backend, batching",
    [
        ("fsdp", {"micro_batch_size": 3}),  # one padded row per sample
        ("fsdp", {"use_dynamic_batch_size": True, "max_tokens_per_gpu": 40}),  # samples packed end to end
        ("megatron", {"micro_batch_size": 3}),  # vocabulary-parallel logits, gathered
    ],
)
def test_a_slime_loss_from_the_logits_trains_as_the_built_in_policy_gradient(
    tmp_path, tiny_model_dir, backend, batching
):
    from slime_core.testing import make_config, synthetic_rollout_batch

    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    common = dict(
        train_backend=backend,
        rollout_batch_size=2,
        n_samples_per_prompt=4,
        num_steps_per_rollout=1,
        lr=1e-3,
        rollout_max_response_len=8,
        rollout_temperature=0.7,
        **batching,
    )
    custom = make_config(
        data, tiny_model_dir, loss_type="custom_loss", custom_loss_function_path=HERE + "pg_from_logits", **common
    )
    assert custom.loss_type == "slime.custom_loss"
    batch = synthetic_rollout_batch(num_groups=2, seed=3)
    ours, ours_weights = _train_one_step(make_config(data, tiny_model_dir, **common), batch)
    theirs, their_weights = _train_one_step(custom, batch)
    assert ours["grad_norm"] > 0
    for key in ("loss", "pg_loss", "grad_norm"):  # same gradient, same scale
        assert theirs[key] == pytest.approx(ours[key], rel=1e-4, abs=1e-6)
    for name, weight in ours_weights.items():  # Adam moves each weight by about lr = 1e-3 (less where g ≈ eps)
        torch.testing.assert_close(their_weights[name], weight, rtol=0, atol=2e-5)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("backend", ["fsdp", "megatron"])
def test_a_slime_loss_gets_the_per_token_entropy_the_run_logs(ray_cluster, tiny_model_dir, tmp_path, backend):
    """One rollout, one step on π_old's weights: the loss's per-sample entropies have the
    response's length, their mean over every response token is ``train/rollout_entropy`` (the
    old log-prob pass's), and its log-probs are π_old's; a ``--custom-advantage-function-path``
    function gets the same per-sample entropies in ``rollout_data["entropy"]``, as in slime."""
    from slime_core.cli.run import run_command
    from slime_core.loop.run_dir import read_metrics
    from slime_core.plugins import Plugins

    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+1=", "label": str(a + 1)}) + "\n" for a in range(4)))
    out = tmp_path / "run"
    flags = [
        *("--prompt-data", str(data), "--hf-checkpoint", str(tiny_model_dir), "--train-backend", backend),
        *("--rollout-engine", "cpu", "--rm-type", "exact_match", "--num-rollout", "1", "--rollout-batch-size", "2"),
        *("--n-samples-per-prompt", "2", "--rollout-max-response-len", "4", "--output-dir", str(out)),
        *("--loss-type", "custom_loss", "--custom-loss-function-path", HERE + "pg_with_entropy"),
        *("--use-rollout-entropy", "--entropy-coef", "0.01", "--router", "none"),
        *("--custom-advantage-function-path", HERE + "grpo_recording_entropy"),
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(Path(__file__).parent), prepend=os.pathsep)  # the ranks import HERE
        assert run_command(flags, Plugins()) == 0
    [record] = [r for r in read_metrics(out / "metrics.jsonl") if r["rollout_id"] >= 0]
    calls = [json.loads(line) for line in (out / "custom_loss_calls.jsonl").read_text().splitlines()]
    entropy = [e for call in calls for e in call["entropy"]]
    assert [len(e) for e in entropy] == [n for call in calls for n in call["response_lengths"]]
    assert len(entropy) == 4 and all(0 < h for e in entropy for h in e)
    tokens = [h for e in entropy for h in e]
    assert sum(tokens) / len(tokens) == pytest.approx(record["train/rollout_entropy"], abs=1e-5)
    assert max(call["log_prob_gap"] for call in calls) < 1e-5
    seen = [json.loads(line) for line in (out / "advantage_entropy.jsonl").read_text().splitlines()]
    given = [e for call in seen for e in call["entropy"]]  # slime's rollout_data["entropy"], per sample
    assert [len(e) for e in given] == [n for call in seen for n in call["response_lengths"]] and len(given) == 4
    assert not any(call["has_ref_entropy"] for call in seen)  # no reference model in this run
    tokens = [h for e in given for h in e]
    assert sum(tokens) / len(tokens) == pytest.approx(record["train/rollout_entropy"], abs=1e-5)


# ------------------------------------------------------------ config


def test_the_flag_needs_slime_s_loss_type_and_a_reduction_slime_has(make_config):
    with pytest.raises(
        ConfigError,
        match="slime calls it only with --loss-type custom_loss, and --loss-type is "
        "policy_loss; add --loss-type custom_loss, or drop the flag",
    ):
        make_config("--custom-loss-function-path", HERE + "pg_from_logits")
    with pytest.raises(ConfigError, match="never by a constant; drop --use-constant-denominator"):
        make_config(
            "--custom-loss-function-path",
            HERE + "pg_from_logits",
            "--loss-type",
            "custom_loss",
            "--use-constant-denominator",
        )
    config, _ = make_config("--custom-loss-function-path", HERE + "pg_from_logits", "--loss-type", "custom_loss")
    assert config.loss_type == "slime.custom_loss"
