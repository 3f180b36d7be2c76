"""slime's ``--custom-loss-function-path`` (``--loss-type custom_loss``) on a real train rank
(FSDP, Megatron) in this process: a slime-style loss (below, named by dotted path as in a launch script)
that re-implements the on-policy policy gradient from the logits must give the loss, gradient
norm and updated weights of our built-in loss on the same batch; and the config checks."""

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
    log_probs, start = [], 0
    for tokens, total, response in zip(batch["unconcat_tokens"], batch["total_lengths"], batch["response_lengths"]):
        rows = logits[0, start + total - response - 1 : start + total - 1] / args.rollout_temperature
        log_probs.append(rows.log_softmax(-1).gather(-1, tokens[-response:, None]).squeeze(-1))
        start += total
    ratio = torch.exp(torch.cat(log_probs) - torch.cat(batch["log_probs"]))
    loss = sum_of_sample_mean(-torch.cat(batch["advantages"]) * ratio)
    return loss, {"loss": loss.detach(), "pg_loss": loss.detach()}


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
