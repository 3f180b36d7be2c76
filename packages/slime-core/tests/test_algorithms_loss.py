import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from slime_core.algorithms import (
    LossDenominators,
    PolicyLossConfig,
    PolicyLossInputs,
    compute_policy_loss,
    loss_denominators,
    sft_loss,
)

MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0]])


def _on_policy_inputs(**kwargs):
    log_probs = torch.tensor([[-1.0, -2.0], [-0.5, -9.0]], requires_grad=True)
    advantages = torch.tensor([[1.0, 1.0], [-2.0, 0.0]])
    return PolicyLossInputs(log_probs, log_probs.detach(), advantages, MASK, **kwargs)


def test_on_policy_loss_by_hand_with_entropy_and_kl_terms():
    inputs = _on_policy_inputs(
        entropy=torch.tensor([[0.5, 0.5], [1.0, 9.0]]),
        ref_log_probs=torch.tensor([[-1.1, -2.1], [-0.6, 0.0]]),  # k1 = 0.1 on valid tokens
    )
    config = PolicyLossConfig(entropy_coef=0.1, use_kl_loss=True, kl_loss_coef=0.5, kl_loss_type="k1")
    loss, metrics = compute_policy_loss(inputs, config, loss_denominators(MASK))
    # ρ = 1: pg per token = -A; sample means: -1 and 2 -> 0.5; entropy (0.5 + 1)/2; kl 0.1
    assert metrics["pg_loss"] == pytest.approx(0.5)
    assert metrics["entropy"] == pytest.approx(0.75)
    assert metrics["kl_loss"] == pytest.approx(0.1, rel=1e-5)
    assert loss.item() == pytest.approx(0.5 - 0.1 * 0.75 + 0.5 * 0.1, rel=1e-6)
    assert metrics["loss"] == pytest.approx(loss.item())
    assert metrics["pg_clipfrac"] == 0 and metrics["ppo_kl"] == 0
    assert all(isinstance(value, float) for value in metrics.values())


def test_tis_weights_multiply_the_pg_loss():
    inputs = _on_policy_inputs(rollout_log_probs=torch.tensor([[-1.0, -2.0], [-0.5, -9.0]]) - math.log(3.0))
    config = PolicyLossConfig(use_tis=True, tis_clip=2.0)
    loss, metrics = compute_policy_loss(inputs, config, loss_denominators(MASK))
    assert loss.item() == pytest.approx(2 * 0.5)  # every weight is clamped from 3 to 2
    assert metrics["tis_weight"] == pytest.approx(2.0) and metrics["tis_clipfrac"] == pytest.approx(1.0)
    icepop = dataclasses.replace(config, tis_mode="icepop", tis_clip_low=0.5)
    loss, metrics = compute_policy_loss(inputs, icepop, loss_denominators(MASK))
    assert loss.item() == 0 and metrics["icepop_zerofrac"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "config",
    [
        PolicyLossConfig(eps_clip_c=3.0),
        PolicyLossConfig(loss_type="gspo", calculate_per_token_loss=True),
        PolicyLossConfig(loss_type="cispo", eps_clip_high=0.28, use_constant_denominator=True),
    ],
    ids=["ppo-sample-mean", "gspo-token-mean", "cispo-constant"],
)
def test_micro_batch_losses_and_metrics_sum_to_the_whole_batch(config):
    torch.manual_seed(0)
    lengths = torch.tensor([4, 1, 3, 2, 4])
    mask = (torch.arange(4) < lengths[:, None]).float()  # (5, 4)
    old = torch.randn(5, 4) - 1
    log_probs = old + 0.3 * torch.randn(5, 4)
    inputs = PolicyLossInputs(
        log_probs, old, torch.randn(5, 4), mask, torch.rand(5, 4), ref_log_probs=old - 0.1, rollout_log_probs=old + 0.05
    )
    config = dataclasses.replace(
        config, use_kl_loss=True, kl_loss_coef=0.1, use_tis=True, entropy_coef=0.01, use_opsm=True, opsm_delta=0.0
    )
    denominators = dataclasses.replace(loss_denominators(mask), max_tokens_per_sample=4)
    whole, whole_metrics = compute_policy_loss(inputs, config, denominators)
    parts = [_rows(inputs, slice(0, 2)), _rows(inputs, slice(2, 5))]
    results = [compute_policy_loss(part, config, denominators) for part in parts]
    assert sum(loss for loss, _ in results).item() == pytest.approx(whole.item(), rel=1e-5)
    for key, value in whole_metrics.items():
        assert sum(metrics[key] for _, metrics in results) == pytest.approx(value, rel=1e-5, abs=1e-7)


def _rows(inputs, rows):
    columns = {f.name: getattr(inputs, f.name) for f in dataclasses.fields(inputs)}
    return PolicyLossInputs(**{name: None if value is None else value[rows] for name, value in columns.items()})


def test_total_loss_gradient_matches_finite_differences():
    torch.manual_seed(0)
    old = torch.randn(2, 3, dtype=torch.float64) - 1
    log_probs = (old + 0.1 * torch.randn(2, 3, dtype=torch.float64)).requires_grad_()
    entropy = torch.rand(2, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    config = PolicyLossConfig(
        eps_clip_c=3.0, entropy_coef=0.1, use_kl_loss=True, kl_loss_coef=0.2, use_unbiased_kl=True
    )
    advantages, ref = torch.randn(2, 3, dtype=torch.float64), old - 0.2

    def total(lp, ent):
        inputs = PolicyLossInputs(lp, old, advantages, mask, entropy=ent, ref_log_probs=ref)
        return compute_policy_loss(inputs, config, loss_denominators(mask))[0]

    assert torch.autograd.gradcheck(total, (log_probs, entropy))


def test_masked_tokens_get_no_gradient():
    inputs = _on_policy_inputs(entropy=torch.ones(2, 2, requires_grad=True))
    loss, _ = compute_policy_loss(inputs, PolicyLossConfig(entropy_coef=0.1), loss_denominators(MASK))
    loss.backward()
    assert inputs.log_probs.grad[1, 1] == 0 and inputs.entropy.grad[1, 1] == 0
    assert (inputs.log_probs.grad[MASK == 1] != 0).all()


def test_sft_loss_is_the_mean_negative_log_prob():
    log_probs = torch.tensor([[-1.0, -2.0], [-3.0, -50.0]])
    loss, metrics = sft_loss(log_probs, MASK, loss_denominators(MASK))
    assert loss.item() == pytest.approx((1.5 + 3.0) / 2) and metrics["sft_loss"] == pytest.approx(2.25)
    loss, _ = sft_loss(log_probs, MASK, LossDenominators(2, 3), reduction="token_mean")
    assert loss.item() == pytest.approx(2.0)


def test_config_errors_are_collected_and_config_maps_by_name():
    with pytest.raises(ValueError) as error:
        PolicyLossConfig(eps_clip_c=0.5, kl_loss_type="k9", tis_mode="clip")
    assert all(word in str(error.value) for word in ("eps_clip_c", "k9", "clip"))
    config = PolicyLossConfig.from_config(SimpleNamespace(eps_clip=0.3, eps_clip_high=0.4, lr=1e-6))
    assert (config.eps_clip, config.eps_clip_high, config.reduction) == (0.3, 0.4, "sample_mean")
    assert PolicyLossConfig(calculate_per_token_loss=True).reduction == "token_mean"


def test_unknown_loss_type_and_missing_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="Did you mean 'gspo'"):
        compute_policy_loss(_on_policy_inputs(), PolicyLossConfig(loss_type="gpso"), loss_denominators(MASK))
    with pytest.raises(ValueError, match="use_kl_loss needs PolicyLossInputs.ref_log_probs"):
        compute_policy_loss(_on_policy_inputs(), PolicyLossConfig(use_kl_loss=True), loss_denominators(MASK))


def test_a_plugin_loss_fn_is_used_when_given():
    def constant_loss(log_probs, old_log_probs, advantages, loss_mask, config):
        return log_probs * 0 + 2.0 * loss_mask, torch.zeros_like(log_probs)

    config, denominators = PolicyLossConfig(), loss_denominators(MASK)
    loss, _ = compute_policy_loss(_on_policy_inputs(), config, denominators, loss_fn=constant_loss)
    assert loss.item() == pytest.approx(2.0)


def test_mismatch_metrics_are_reported_without_reweighting_the_loss():
    inputs = _on_policy_inputs(rollout_log_probs=torch.tensor([[-1.0, -2.0], [-0.5, -9.0]]) - math.log(3.0))
    loss, metrics = compute_policy_loss(inputs, PolicyLossConfig(get_mismatch_metrics=True), loss_denominators(MASK))
    # π_old/π_rollout = 3 on every token, clamped to 2 but not applied: the loss stays -A's mean
    assert loss.item() == pytest.approx(0.5)
    assert metrics["tis_weight"] == pytest.approx(2.0) and metrics["tis_clipfrac"] == pytest.approx(1.0)
    assert metrics["train_rollout_logprob_abs_diff"] == pytest.approx(math.log(3.0))


def test_rollout_logprobs_anchor_the_ratio_while_mismatch_weights_keep_the_trainer_old_log_probs():
    inputs = _on_policy_inputs(rollout_log_probs=torch.tensor([[-1.0, -2.0], [-0.5, -9.0]]) - math.log(1.1))
    config = PolicyLossConfig(use_rollout_logprobs=True, get_mismatch_metrics=True)
    loss, metrics = compute_policy_loss(inputs, config, loss_denominators(MASK))
    # ρ = π/π_rollout = 1.1, inside the band: pg = -1.1·A; sample means -1.1 and 2.2
    assert loss.item() == pytest.approx((-1.1 + 2.2) / 2)
    assert metrics["ppo_kl"] == pytest.approx(-math.log(1.1), rel=1e-5)
    assert metrics["tis_weight"] == pytest.approx(1.1, rel=1e-5)  # π_old/π_rollout, not π_rollout/π_rollout
    with pytest.raises(ValueError, match="use_rollout_logprobs and use_tis exclude each other"):
        PolicyLossConfig(use_rollout_logprobs=True, use_tis=True)
    with pytest.raises(ValueError, match="use_rollout_logprobs needs PolicyLossInputs.rollout_log_probs"):
        compute_policy_loss(_on_policy_inputs(), PolicyLossConfig(use_rollout_logprobs=True), loss_denominators(MASK))


def test_opsm_masks_the_policy_loss_and_reports_the_dropped_share():
    log_probs = torch.tensor([[-1.0, -2.0], [-0.5, -9.0]], requires_grad=True)
    old = log_probs.detach() + torch.tensor([[0.3, 0.1], [0.0, 0.0]])  # sample 0 drifted by 0.2 on average
    advantages = torch.tensor([[-1.0, 1.0], [-2.0, 0.0]])
    config = PolicyLossConfig(use_opsm=True, opsm_delta=0.1)
    inputs = PolicyLossInputs(log_probs, old, advantages, MASK)
    loss, metrics = compute_policy_loss(inputs, config, loss_denominators(MASK))
    # sample 0: its A < 0 token is dropped, the other has ρ = e^-0.1 inside the band: -e^-0.1·1;
    # sample 1 did not drift: ρ = 1, -A = 2
    assert loss.item() == pytest.approx((-math.exp(-0.1) / 2 + 2.0) / 2, rel=1e-6)
    assert metrics["opsm_clipfrac"] == pytest.approx((1 / 2 + 0) / 2)


def test_samples_of_one_rollout_share_its_token_denominator():
    loss_per_token = torch.tensor([[1.0, 3.0], [5.0, 0.0], [2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    inputs = PolicyLossInputs(
        -loss_per_token, -loss_per_token, torch.zeros(3, 2), mask, sample_tokens=torch.tensor([3.0, 3.0, 1.0])
    )
    denominators = loss_denominators(mask, rollout_ids=[0, 0, 1])
    _, metrics = compute_policy_loss(inputs, PolicyLossConfig(loss_type="sft_loss"), denominators)
    # rollout 0 (samples 0, 1): (1 + 3 + 5) / 3 tokens; rollout 1: 2 / 1; two rollouts
    assert metrics["pg_loss"] == pytest.approx((9 / 3 + 2 / 1) / 2)
