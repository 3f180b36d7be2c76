"""`slime_core.rank.step`: the backend-independent RL step of a train rank, on two gloo
processes (shares of different sizes) compared with the whole batch on one."""

import math
import socket

import pytest
import torch
import torch.distributed as dist

from slime_core.rank.step import RankStep, RolloutSteps, check_prompts, lr_factor, pad_rows, sum_over_ranks
from slime_core.rollout_batch import RolloutBatch
from slime_core.sample import Sample, SampleStatus


class _Config:
    """The options `RankStep` reads, as attributes (what ``Config`` gives a rank)."""

    advantage_estimator = "grpo"
    loss_type = "policy_loss"
    kl_coef = 0.0
    kl_loss_type = "low_var_kl"
    gamma = 1.0
    lambd = 1.0
    normalize_advantages = True
    disable_rewards_normalization = False
    disable_grpo_std_normalization = False
    use_dynamic_batch_size = False
    micro_batch_size = 2
    max_tokens_per_gpu = 64
    rollout_max_response_len = 4
    opd_kl_coef = 0.0
    num_steps_per_rollout = 2  # old log-probs by a forward of their own
    lr, min_lr, lr_warmup_iters, lr_decay_style, lr_decay_iters = 1e-3, 1e-4, 2, "cosine", 6

    def get(self, name, default=None):
        return getattr(self, name, default)


def _batch() -> RolloutBatch:
    """A group of four samples and one of two; responses of 1..3 tokens."""
    lengths = [1, 2, 3, 3, 2, 1]
    return RolloutBatch(
        tokens=[[5] * 3 + [6] * n for n in lengths],
        response_lengths=lengths,
        loss_masks=[[1] * n for n in lengths],
        rewards=[1.0, 0.0, 0.0, 1.0, 1.0, 0.0],
        group_ids=[0, 0, 0, 0, 1, 1],
        rollout_log_probs=[[-0.5 * (i + 1)] * n for i, n in enumerate(lengths)],
    )


def _log_probs(batch: RolloutBatch):
    """Made-up 'actor' log-probs that differ per sample and token."""
    return lambda model: [
        torch.tensor([-0.1 * (t + 1) - r for t in range(len(m))]) for m, r in zip(batch.loss_masks, batch.rewards)
    ]


def _step_results(batch: RolloutBatch) -> dict:
    step = RankStep(_Config())
    data = step.tensors(batch, _log_probs(batch), reference=False, teacher=False)
    indices = list(range(len(batch)))
    denominators = step.denominators(data, indices)
    _, metrics = step.loss(data.loss_inputs(indices, data.old.clone(), None), denominators)
    return {
        "advantages": [row[: len(m)].tolist() for row, m in zip(data.advantages, batch.loss_masks)],
        "plan": step.plan(indices, batch),
        "denominators": denominators,
        "sums": sum_over_ranks({"loss": float(len(batch))}),
        "gap": sum_over_ranks({"gap": metrics["train_rollout_logprob_abs_diff"]})["gap"],
        "rollout": step.rollout_metrics([{"loss": 1.0}, {"loss": 3.0}]),
        # a NaN loss on rank 1 alone (its share's), an infinite norm seen by every rank
        "apply_nan_loss": step.apply_step({"loss": math.nan if dist.get_rank() == 1 else 1.0}, 1.0),
        "apply_inf_norm": step.apply_step({"loss": 1.0}, math.inf),
        "apply_finite": step.apply_step({"loss": 1.0}, 2.0),
    }


def _rank_main(rank: int, world_size: int, port: int) -> dict:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        share = [0, 1, 2, 3] if rank == 0 else [4, 5]  # whole groups, uneven shares
        return _step_results(_batch().select(share))
    finally:
        dist.destroy_process_group()


def _single_process(port: int) -> dict:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        return _step_results(_batch())
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_ranks_plan_together_and_count_and_sum_the_global_batch(rank_pool):
    results = rank_pool.run((__file__, "_rank_main"), 2)
    whole = _single_process(_free_port())
    # rank 0 needs 2 micro-batches of 2; rank 1 one, padded with an empty one
    assert results[0]["plan"] == [[0, 1], [2, 3]] and results[1]["plan"] == [[0, 1], []]
    assert results[0]["denominators"] == results[1]["denominators"] == whole["denominators"]
    assert whole["denominators"].num_samples == 6 and whole["denominators"].num_tokens == 12
    assert results[0]["sums"] == results[1]["sums"] == {"loss": 6.0}
    assert results[0]["gap"] == pytest.approx(whole["gap"]) == pytest.approx(results[1]["gap"])
    # slime's train_rollout_logprob_abs_diff: the mean over samples of each sample's mean |π_old - π_rollout|
    batch = _batch()
    gaps = [
        sum(abs(-0.1 * (t + 1) - r + 0.5 * (i + 1)) for t in range(n)) / n
        for i, (n, r) in enumerate(zip(batch.response_lengths, batch.rewards))
    ]
    assert whole["gap"] == pytest.approx(sum(gaps) / 6, rel=1e-6)
    assert whole["rollout"] == {"loss": 2.0, "skipped_steps": 0.0}  # the mean over the steps
    # a step is skipped on every rank when the loss or the norm is not finite on any rank
    assert [r["apply_nan_loss"] for r in results] == [False, False] and whole["apply_nan_loss"] is True
    assert [r["apply_inf_norm"] for r in results] == [False, False] and whole["apply_inf_norm"] is False
    assert [r["apply_finite"] for r in results] == [True, True]
    # whitening runs over both ranks: the shares' advantages are the whole batch's
    shares = results[0]["advantages"] + results[1]["advantages"]
    assert all(a == pytest.approx(b, abs=1e-6) for a, b in zip(shares, whole["advantages"]))


def test_grpo_advantages_are_the_group_normalised_rewards():
    port = _free_port()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        config = _Config()
        config.normalize_advantages = False
        batch = _batch()
        data = RankStep(config).tensors(batch, _log_probs(batch), reference=False, teacher=False)
    finally:
        dist.destroy_process_group()
    # group 0: rewards 1, 0, 0, 1: mean 1/2, unbiased std sqrt(1/3)
    expected = (1 - 1 / 2) / (math.sqrt(1 / 3) + 1e-6)
    assert data.advantages[0, 0].item() == pytest.approx(expected, rel=1e-5)
    assert data.mask.tolist()[0] == [1, 0, 0] and data.ref is None
    assert torch.equal(data.rollout, pad_rows(batch.rollout_log_probs))  # for train_rollout_logprob_abs_diff
    inputs = data.loss_inputs([2, 0], torch.zeros(2, 2), None)
    assert inputs.loss_mask.tolist() == [[1, 1], [1, 0]] and inputs.old_log_probs.shape == (2, 2)


def test_one_step_per_rollout_takes_old_log_probs_from_the_training_forward():
    port = _free_port()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        config, batch = _Config(), _batch()
        config.num_steps_per_rollout = 1

        def forward_only_for_the_reference(model):
            assert model == "ref", f"a no-grad forward of {model!r} was run"
            return _log_probs(batch)(model)

        step = RankStep(config)
        data = step.tensors(batch, forward_only_for_the_reference, reference=True, teacher=False)
        current = -torch.rand(6, 3, requires_grad=True)  # the training forward's log-probs
        inputs = data.loss_inputs(list(range(6)), current, None)
        _, metrics = step.loss(inputs, step.denominators(data, list(range(6))))
        # a KL penalty in the reward or several steps per rollout need π_old before the forward
        config.kl_coef = 0.1
        with pytest.raises(AssertionError, match="'actor'"):
            step.tensors(batch, forward_only_for_the_reference, reference=True, teacher=False)
    finally:
        dist.destroy_process_group()
    assert data.old_from_forward and inputs.ref_log_probs is not None
    assert torch.equal(inputs.old_log_probs, current.detach()) and not inputs.old_log_probs.requires_grad
    rollout, mask = pad_rows(batch.rollout_log_probs), data.mask
    per_sample = ((current.detach() - rollout).abs() * mask).sum(-1) / mask.sum(-1)  # the forward's π_old, the engine
    assert metrics["train_rollout_logprob_abs_diff"] == pytest.approx(float(per_sample.mean()))


def test_teacher_log_probs_carried_by_the_samples_give_the_teacher_model_s_advantages():
    """On-policy distillation: the samples' teacher log-probs (slime's --rm-url teacher) and a
    teacher model's (--opd-teacher-load) giving the same values train the same advantages."""
    config, batch = _Config(), _batch()
    config.opd_kl_coef, config.num_steps_per_rollout = 0.5, 1
    teacher = [[-0.3 * (t + 1) for t in range(n)] for n in batch.response_lengths]

    def model_log_probs(model):
        return [torch.tensor(t) for t in teacher] if model == "teacher" else _log_probs(batch)(model)

    def no_teacher_model(model):
        assert model != "teacher", "the teacher model was asked although the samples carry its log-probs"
        return _log_probs(batch)(model)

    port = _free_port()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        step = RankStep(config)
        native = step.tensors(batch, model_log_probs, reference=False, teacher=True)
        without = step.tensors(batch, _log_probs(batch), reference=False, teacher=False)
        batch.teacher_log_probs = teacher
        carried = step.tensors(batch, no_teacher_model, reference=False, teacher=False)
    finally:
        dist.destroy_process_group()
    assert not carried.old_from_forward  # the KL term needs π_old before the forward
    assert torch.equal(carried.advantages, native.advantages)
    assert not torch.allclose(carried.advantages, without.advantages)


def test_samples_of_one_rollout_share_a_denominator_within_each_optimizer_step():
    lengths, rids = [1, 2, 3, 3, 2, 1], ["a", "a", "b", "b", "b", None]
    samples = [
        Sample(
            group_index=0 if i < 4 else 1,
            index=i,
            tokens=[5] * 3 + [6] * n,
            response_length=n,
            loss_mask=[1] * n,
            rollout_log_probs=[-0.5] * n,
            reward=1.0,
            status=SampleStatus.COMPLETED,
            metadata={} if rid is None else {"turn_of": rid},
        )
        for i, (n, rid) in enumerate(zip(lengths, rids))
    ]
    batch = RolloutBatch.from_samples(samples, rollout_id_key="turn_of")
    port = _free_port()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        step = RankStep(_Config())
        data = step.tensors(batch, _log_probs(batch), reference=False, teacher=False)
        steps = RolloutSteps.plan(batch, data, num_steps=2)  # samples 0-2, then 3-5
        counts = [step.denominators(data, indices).num_samples for indices in steps.slices]
        inputs = data.loss_inputs([3, 4, 5], data.old[[3, 4, 5]].clone(), None)
    finally:
        dist.destroy_process_group()
    # step 0: rollout (group 0, a) has samples 0, 1: 1 + 2 tokens; (group 0, b) sample 2: 3 tokens.
    # step 1: (group 0, b) only sample 3 here: 3; (group 1, b) is another group's rollout: 2; sample 5 alone: 1
    assert data.sample_tokens.tolist() == [3.0, 3.0, 3.0, 3.0, 2.0, 1.0]
    assert counts == [2, 3] and inputs.sample_tokens.tolist() == [3.0, 2.0, 1.0]


def test_lr_schedule_warms_up_then_decays_to_the_minimum():
    factors = [lr_factor(step, 2, "cosine", 6, 0.1) for step in range(8)]
    assert factors[:3] == [0.5, 1.0, 1.0] and factors[4] == pytest.approx(0.55) and factors[6:] == [0.1, 0.1]
    assert [lr_factor(step, 0, "linear", 4, 0.0) for step in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]
    with pytest.raises(ValueError, match="unknown --lr-decay-style 'step'"):
        lr_factor(3, 0, "step", 4, 0.0)


def test_samples_without_prompt_or_response_are_refused_and_rows_are_padded():
    with pytest.raises(ValueError, match="at least one prompt token and one response token"):
        check_prompts([[1, 2, 3]], [3])
    assert pad_rows([[1.0], torch.tensor([2.0, 3.0])], value=-1.0).tolist() == [[1.0, -1.0], [2.0, 3.0]]


def test_skipped_steps_are_counted_and_left_out_of_the_rollout_s_averages():
    step = RankStep.__new__(RankStep)  # rollout_metrics reads no option
    history = [
        {"loss": 1.0, "grad_norm": 2.0, "skipped_step": 0.0},
        {"loss": math.nan, "grad_norm": math.inf, "skipped_step": 1.0},
        {"loss": 3.0, "grad_norm": 4.0, "skipped_step": 0.0},
    ]
    assert step.rollout_metrics(history) == {"loss": 2.0, "grad_norm": 3.0, "skipped_steps": 1.0}
    everything_skipped = step.rollout_metrics(history[1:2])
    assert math.isnan(everything_skipped["loss"]) and everything_skipped["skipped_steps"] == 1.0


def test_nonfinite_parameters_names_the_parameters_with_a_nan_or_an_infinity():
    from slime_core.rank.step import nonfinite_parameters

    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2))
    assert nonfinite_parameters(model.named_parameters()) == []
    with torch.no_grad():
        model[0].bias[1] = math.nan
        model[1].weight[0, 0] = -math.inf
    assert nonfinite_parameters(model.named_parameters()) == ["0.bias", "1.weight"]
