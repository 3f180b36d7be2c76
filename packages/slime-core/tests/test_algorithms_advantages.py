import math

import pytest
import torch

from slime_core.algorithms import (
    ADVANTAGE_ESTIMATORS,
    AdvantageInputs,
    discounted_cumsum,
    group_normalize_rewards,
)


def _inputs(rewards, loss_mask, group_ids=None, **kwargs):
    rewards = torch.tensor(rewards, dtype=torch.float32)
    group_ids = torch.zeros(len(rewards), dtype=torch.long) if group_ids is None else torch.tensor(group_ids)
    loss_mask = torch.tensor(loss_mask, dtype=torch.float32)
    return AdvantageInputs(rewards=rewards, group_ids=group_ids, loss_mask=loss_mask, **kwargs)


def test_group_normalize_handles_groups_of_different_sizes_and_non_contiguous_ids():
    rewards = torch.tensor([1.0, 2.0, 3.0, 4.0, 6.0, 100.0])
    group_ids = torch.tensor([7, 3, 7, 3, 3, 9])
    got = group_normalize_rewards(rewards, group_ids)
    # group 7: [1, 3], mean 2, std √2; group 3: [2, 4, 6], mean 4, std 2; group 9 alone -> 0
    s = 1 / math.sqrt(2)
    assert torch.allclose(got, torch.tensor([-s, -1.0, s, 0.0, 1.0, 0.0]), atol=1e-5)


def test_group_normalize_without_std_only_centres():
    rewards, group_ids = torch.tensor([1.0, 2.0, 3.0, 4.0, 6.0]), torch.tensor([7, 3, 7, 3, 3])
    got = group_normalize_rewards(rewards, group_ids, std_normalize=False)
    assert torch.allclose(got, torch.tensor([-1.0, -2.0, 1.0, 0.0, 2.0]))


def test_group_normalize_sums_to_zero_per_group():
    torch.manual_seed(0)
    group_ids = torch.randint(0, 5, (64,))
    advantages = group_normalize_rewards(torch.rand(64), group_ids)
    sums = torch.zeros(5).index_add_(0, group_ids, advantages)
    assert torch.allclose(sums, torch.zeros(5), atol=1e-5)


def test_reinforce_plus_plus_baseline_never_divides_by_the_std():
    advantages, _ = ADVANTAGE_ESTIMATORS["reinforce_plus_plus_baseline"](_inputs([4.0, 0.0], [[1], [1]]))
    assert torch.equal(advantages, torch.tensor([[2.0], [-2.0]]))


def test_group_normalize_never_gives_nan_for_singletons_or_equal_rewards():
    got = group_normalize_rewards(torch.tensor([5.0, 1.0, 1.0, 1.0]), torch.tensor([0, 1, 1, 1]))
    assert torch.equal(got, torch.zeros(4))


@pytest.mark.parametrize("name", ["grpo", "gspo", "cispo"])
def test_grpo_family_puts_the_normalised_reward_on_every_valid_token(name):
    inputs = _inputs([1.0, 0.0, 1.0, 0.0], [[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]])
    advantages, returns = ADVANTAGE_ESTIMATORS[name](inputs)
    a = 0.5 / math.sqrt(1 / 3)  # mean 0.5, unbiased std √(1/3)
    expected = torch.tensor([[a, a, 0], [-a, 0, 0], [a, a, a], [-a, -a, 0]])
    assert torch.allclose(advantages, expected, atol=1e-5) and torch.equal(returns, advantages)


def test_dr_grpo_does_not_divide_by_the_std():
    advantages, _ = ADVANTAGE_ESTIMATORS["dr_grpo"](_inputs([1.0, 0.0], [[1, 1], [1, 0]]))
    assert torch.equal(advantages, torch.tensor([[0.5, 0.5], [-0.5, 0.0]]))


@pytest.mark.parametrize("name", ["grpo", "gspo", "cispo"])
def test_disabling_the_grpo_std_normalization_only_centres(name):
    """--disable-grpo-std-normalization: r - mean_g (4 - 2 = 2, not 2 / std = √2)."""
    inputs = _inputs([4.0, 0.0], [[1, 1], [1, 0]], std_normalize=False)
    advantages, _ = ADVANTAGE_ESTIMATORS[name](inputs)
    assert torch.equal(advantages, torch.tensor([[2.0, 2.0], [-2.0, 0.0]]))


@pytest.mark.parametrize("name", ["grpo", "gspo", "cispo", "dr_grpo", "reinforce_plus_plus_baseline"])
def test_disabling_rewards_normalization_trains_group_estimators_on_the_raw_reward(name):
    """--disable-rewards-normalization: neither centred nor scaled, std option or not."""
    for std_normalize in (True, False):
        inputs = _inputs([4.0, 0.0], [[1, 1], [1, 0]], normalize_rewards=False, std_normalize=std_normalize)
        advantages, _ = ADVANTAGE_ESTIMATORS[name](inputs)
        assert torch.equal(advantages, torch.tensor([[4.0, 4.0], [0.0, 0.0]]))


def test_reinforce_plus_plus_discounts_kl_penalised_token_rewards():
    log_probs = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    ref = log_probs - torch.tensor([[0.1, 0.2, 0.3, 9.0]])
    inputs = _inputs([1.0], [[1, 1, 1, 0]], log_probs=log_probs, ref_log_probs=ref, kl_coef=0.1, gamma=0.5)
    advantages, returns = ADVANTAGE_ESTIMATORS["reinforce_plus_plus"](inputs)
    # token rewards [-0.01, -0.02, 1 - 0.03]; G2 = .97, G1 = -.02 + .5·.97, G0 = -.01 + .5·G1
    assert torch.allclose(advantages, torch.tensor([[0.2225, 0.465, 0.97, 0.0]]))
    assert torch.equal(returns, advantages)


def test_discounted_cumsum_by_hand():
    got = discounted_cumsum(torch.tensor([[0.0, 5.0, 1.0, 0.0]]), 0.5)
    assert torch.equal(got, torch.tensor([[2.75, 5.5, 1.0, 0.0]]))  # G2 = 1, G1 = 5 + .5, G0 = .5·5.5


def test_reinforce_plus_plus_charges_gamma_for_masked_holes_and_ignores_their_kl():
    """slime: the KL of a masked token (tool output) is dropped, but the token still costs a
    factor γ; the old code stepped over it (G0 would be 1·.5 - .1 = .4)."""
    log_probs = torch.zeros(1, 4)
    ref = -torch.tensor([[1.0, 7.0, 1.0, 7.0]])  # k1 = [1, 7, 1, 7]
    inputs = _inputs([1.0], [[1, 0, 1, 0]], log_probs=log_probs, ref_log_probs=ref, kl_coef=0.1, gamma=0.5)
    advantages, _ = ADVANTAGE_ESTIMATORS["reinforce_plus_plus"](inputs)
    # token rewards [-.1, 0, 1 - .1, 0]; G2 = .9, G1 = .5·.9 = .45, G0 = -.1 + .5·.45
    assert torch.allclose(advantages, torch.tensor([[0.125, 0.0, 0.9, 0.0]]))


def test_reinforce_plus_plus_rejects_a_fully_masked_sample_by_name():
    inputs = _inputs([1.0, 1.0, 0.0], [[1, 1], [1, 0], [0, 0]], group_ids=[4, 4, 9])
    with pytest.raises(ValueError, match=r"sample 2 of the rank's batch \(prompt group 9\) has an all-zero loss mask"):
        ADVANTAGE_ESTIMATORS["reinforce_plus_plus"](inputs)


def test_reinforce_plus_plus_baseline_subtracts_the_group_mean_and_the_kl():
    log_probs = torch.zeros(2, 2)
    ref = torch.tensor([[-1.0, -2.0], [-3.0, 0.0]])  # k1 = [[1, 2], [3, 0]]
    inputs = _inputs([1.0, 0.0], [[1, 1], [1, 0]], log_probs=log_probs, ref_log_probs=ref, kl_coef=0.1)
    advantages, _ = ADVANTAGE_ESTIMATORS["reinforce_plus_plus_baseline"](inputs)
    assert torch.allclose(advantages, torch.tensor([[0.4, 0.3], [-0.8, 0.0]]))


def test_ppo_gae_by_hand():
    inputs = _inputs(
        [1.0],
        [[1, 1, 1]],
        values=torch.tensor([[0.5, 0.6, 0.7]]),
        response_lengths=torch.tensor([3]),
        gamma=0.9,
        lambd=0.8,
    )
    advantages, returns = ADVANTAGE_ESTIMATORS["ppo"](inputs)
    # δ = [.9·.6 - .5, .9·.7 - .6, 1 - .7] = [.04, .03, .3]; A_t = δ_t + .72·A_{t+1}
    assert torch.allclose(advantages, torch.tensor([[0.21712, 0.246, 0.3]]))
    assert torch.allclose(returns, torch.tensor([[0.71712, 0.846, 1.0]]))


def test_ppo_gae_runs_through_masked_tokens_as_slime():
    """Response of 4 tokens, mask [1, 0, 1, 0], then padding. slime bootstraps from the masked
    token's value, charges its KL and γλ, and puts the reward on the last response token
    although it is masked; the old code skipped all four (A0 would be .13 + .72·.3)."""
    log_probs = torch.zeros(1, 5)
    ref = -torch.tensor([[1.0, 2.0, 0.0, 0.0, 9.0]])  # k1 = [1, 2, 0, 0, 9]
    values = torch.tensor([[0.5, 0.4, 0.7, 0.2, 9.0]])
    inputs = _inputs(
        [1.0],
        [[1, 0, 1, 0, 0]],
        values=values,
        response_lengths=torch.tensor([4]),
        gamma=0.9,
        lambd=0.5,
        log_probs=log_probs,
        ref_log_probs=ref,
        kl_coef=0.1,
    )
    advantages, returns = ADVANTAGE_ESTIMATORS["ppo"](inputs)
    # r = [-.1, -.2, 0, 1]; δ = r + .9·V_next - V: [-.1+.36-.5, -.2+.63-.4, .18-.7, 1-.2] = [-.24, .03, -.52, .8]
    # A3 = .8, A2 = -.52 + .45·.8 = -.16, A1 = .03 + .45·(-.16) = -.042, A0 = -.24 + .45·(-.042) = -.2589
    assert torch.allclose(advantages, torch.tensor([[-0.2589, 0.0, -0.16, 0.0, 0.0]]))
    assert torch.allclose(returns, torch.tensor([[0.5 - 0.2589, 0.0, 0.7 - 0.16, 0.0, 0.0]]))


def test_ppo_puts_the_reward_on_the_last_response_token_not_on_padding():
    inputs = _inputs(
        [1.0, 1.0],
        [[1, 1, 1], [1, 1, 0]],
        values=torch.zeros(2, 3),
        response_lengths=torch.tensor([3, 2]),
        gamma=0.5,
        lambd=1.0,
    )
    advantages, _ = ADVANTAGE_ESTIMATORS["ppo"](inputs)
    assert torch.allclose(advantages, torch.tensor([[0.25, 0.5, 1.0], [0.5, 1.0, 0.0]]))


def test_ppo_with_gamma_and_lambda_one_gives_monte_carlo_returns():
    torch.manual_seed(0)
    values = torch.rand(3, 6)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0]], dtype=torch.float32)
    rewards = torch.tensor([1.0, -2.0, 0.5])
    inputs = AdvantageInputs(
        rewards=rewards, group_ids=torch.arange(3), loss_mask=mask, values=values, response_lengths=mask.sum(-1).long()
    )
    advantages, returns = ADVANTAGE_ESTIMATORS["ppo"](inputs)
    assert torch.allclose(returns, inputs.rewards[:, None] * mask)
    assert torch.allclose(advantages, (inputs.rewards[:, None] - values) * mask)


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_every_estimator_has_the_uniform_signature_and_zeroes_masked_tokens(name):
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1], [1, 0, 1, 1, 0]], dtype=torch.float32)
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0, 0.0, 0.5]),
        group_ids=torch.tensor([0, 0, 1]),
        loss_mask=mask,
        log_probs=torch.randn(3, 5),
        ref_log_probs=torch.randn(3, 5),
        values=torch.rand(3, 5),
        response_lengths=torch.tensor([3, 5, 4]),
        kl_coef=0.1,
    )
    advantages, returns = ADVANTAGE_ESTIMATORS[name](inputs)
    assert advantages.shape == returns.shape == (3, 5)
    assert (advantages[mask == 0] == 0).all() and (returns[mask == 0] == 0).all()
    assert torch.isfinite(advantages).all() and advantages[mask == 1].abs().sum() > 0


def test_missing_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="critic values"):
        ADVANTAGE_ESTIMATORS["ppo"](_inputs([1.0], [[1, 1]]))
    with pytest.raises(ValueError, match="response_lengths"):
        ADVANTAGE_ESTIMATORS["ppo"](_inputs([1.0], [[1, 1]], values=torch.zeros(1, 2)))
    with pytest.raises(ValueError, match="ref_log_probs"):
        ADVANTAGE_ESTIMATORS["reinforce_plus_plus"](_inputs([1.0], [[1, 1]], kl_coef=0.1))
