import math
from types import SimpleNamespace

import pytest
import torch

from slime_core.algorithms import (
    POLICY_LOSSES,
    cispo_policy_loss,
    clipped_policy_loss,
    gspo_policy_loss,
    gspo_sequence_log_ratio,
    ppo_policy_loss,
)
from slime_core.algorithms.policy_loss import opsm_keep_mask


def _log_ratio(ratios):
    return torch.log(torch.tensor(ratios, dtype=torch.float64))


def test_ppo_clip_takes_the_pessimistic_term_per_token():
    ratios = [1.5, 1.5, 0.5, 0.5, 1.1]
    advantages = torch.tensor([1.0, -1.0, 1.0, -1.0, 2.0], dtype=torch.float64)
    old = torch.full((5,), -2.0, dtype=torch.float64)
    loss, clipfrac = ppo_policy_loss(old + _log_ratio(ratios), old, advantages, eps_clip=0.2)
    # max(-ρA, -clip(ρ, 0.8, 1.2)A): [max(-1.5,-1.2), max(1.5,1.2), max(-.5,-.8), max(.5,.8), -2.2]
    assert torch.allclose(loss, torch.tensor([-1.2, 1.5, -0.5, 0.8, -2.2], dtype=torch.float64))
    assert torch.allclose(clipfrac, torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0]))


def test_eps_clip_high_moves_only_the_upper_bound():
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    old = torch.zeros(2, dtype=torch.float64)
    loss, _ = ppo_policy_loss(_log_ratio([1.5, 0.5]), old, advantages, eps_clip=0.2, eps_clip_high=0.28)
    assert torch.allclose(loss, torch.tensor([-1.28, 0.8], dtype=torch.float64))


def test_dual_clip_caps_negative_advantage_tokens_at_eps_c():
    ratios = [5.0, 2.0, 5.0, 0.5]
    advantages = torch.tensor([-1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    loss, clipfrac = clipped_policy_loss(_log_ratio(ratios), advantages, eps_clip=0.2, eps_clip_c=3.0)
    # A<0: min(max(ρ, clip(ρ)), 3) -> [min(5, 3), 2, ., min(max(.5, .8), 3)]; A>0 is untouched: -1.2
    assert torch.allclose(loss, torch.tensor([3.0, 2.0, -1.2, 0.8], dtype=torch.float64))
    # slime's clipfrac: the ε clip decided (-clip(ρ)·A > -ρ·A), before the dual clip; the first
    # token's loss is the ε_c cap, but ε did not decide it (5 > 1.2), so it is not counted
    assert torch.allclose(clipfrac, torch.tensor([0.0, 0.0, 1.0, 1.0]))


def test_dual_clip_bound_must_exceed_one():
    with pytest.raises(ValueError, match="eps_clip_c"):
        ppo_policy_loss(torch.zeros(2), torch.zeros(2), torch.ones(2), eps_clip=0.2, eps_clip_c=0.9)


def test_ppo_gradient_is_minus_rho_a_inside_the_band_and_zero_when_clipped():
    log_probs = _log_ratio([1.1, 1.5, 0.9]).requires_grad_()
    advantages = torch.tensor([2.0, 1.0, -1.0], dtype=torch.float64)
    loss, _ = ppo_policy_loss(log_probs, torch.zeros(3, dtype=torch.float64), advantages, eps_clip=0.2)
    loss.sum().backward()
    assert torch.allclose(log_probs.grad, torch.tensor([-2.2, 0.0, 0.9], dtype=torch.float64))


# CISPO's value is not the function its gradient belongs to (the weight is stop-gradient), so
# finite differences do not apply; its gradient is checked by hand below.
@pytest.mark.parametrize("name", ["ppo", "gspo"])
def test_policy_losses_match_finite_differences(name):
    torch.manual_seed(0)
    old = torch.randn(2, 4, dtype=torch.float64) - 2
    log_probs = (old + 0.3 * torch.randn(2, 4, dtype=torch.float64)).requires_grad_()
    advantages = torch.randn(2, 4, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.float64)
    config = SimpleNamespace(eps_clip=0.2, eps_clip_high=0.28, eps_clip_c=3.0)
    loss_fn = POLICY_LOSSES[name]
    assert torch.autograd.gradcheck(lambda lp: loss_fn(lp, old, advantages, mask, config)[0], (log_probs,))


@pytest.mark.parametrize("name", ["ppo", "gspo", "cispo"])
def test_policy_losses_are_zero_where_the_mask_is_zero(name):
    torch.manual_seed(1)
    log_probs, old, advantages = torch.randn(3, 2, 5).unbind(0)
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 0, 1, 1, 0]], dtype=torch.float32)
    config = SimpleNamespace(eps_clip=0.2, eps_clip_high=None, eps_clip_c=None)
    loss, clipfrac = POLICY_LOSSES[name](log_probs, old, advantages, mask, config)
    assert loss.shape == clipfrac.shape == (2, 5)
    assert (loss[mask == 0] == 0).all() and (clipfrac[mask == 0] == 0).all()
    assert (loss[mask == 1] != 0).all()


def test_extreme_log_ratios_give_finite_losses_and_gradients():
    log_probs = torch.tensor([1000.0, 1000.0, 1000.0, -1000.0, -1000.0, -1000.0], requires_grad=True)
    old = torch.zeros(6)
    advantages = torch.tensor([1.0, -1.0, 0.0, 1.0, -1.0, 0.0])
    for eps_clip_c in (None, 3.0):
        loss, _ = ppo_policy_loss(log_probs, old, advantages, eps_clip=0.2, eps_clip_c=eps_clip_c)
        (grad,) = torch.autograd.grad(loss.sum(), log_probs)
        assert torch.isfinite(loss).all() and torch.isfinite(grad).all()
    # where the formula is bounded, the value is exact: clip(ρ)·A and the dual-clip cap
    assert torch.allclose(loss, torch.tensor([-1.2, 3.0, 0.0, -0.0, 0.8, 0.0]))
    cispo, _ = cispo_policy_loss(log_probs, old, advantages, eps_clip=0.2, eps_clip_high=0.28)
    assert torch.isfinite(cispo).all()


def test_gspo_sequence_log_ratio_is_the_masked_mean_broadcast_with_gradient_to_every_token():
    log_probs = torch.tensor([[0.2, 0.4, 7.0], [0.6, -0.6, 0.3]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    log_ratio = gspo_sequence_log_ratio(log_probs, torch.zeros(2, 3), mask)
    assert torch.allclose(log_ratio, torch.tensor([[0.3, 0.3, 0.3], [0.1, 0.1, 0.1]]))
    (log_ratio * mask).sum().backward()
    # d/dlp_t of Σ_valid s = |y|·(1/|y|) = 1 on valid tokens, 0 on masked ones
    assert torch.allclose(log_probs.grad, mask)


def test_gspo_clips_on_the_sequence_ratio():
    log_probs = torch.tensor([[0.2, 0.4, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    advantages = torch.ones(1, 3)
    loss, clipfrac = gspo_policy_loss(log_probs, torch.zeros(1, 3), advantages, mask, eps_clip=0.2)
    # s = exp(0.3) = 1.35 > 1.2: every token's loss is -1.2·A, though token 0 alone (e^0.2) is in-band
    assert torch.allclose(loss, torch.full((1, 3), -1.2))
    assert torch.allclose(clipfrac, torch.ones(1, 3))
    unclipped, _ = gspo_policy_loss(log_probs, torch.zeros(1, 3), advantages, mask, eps_clip=0.5)
    assert torch.allclose(unclipped, torch.full((1, 3), -math.exp(0.3)))


def test_cispo_weights_the_log_prob_by_the_clipped_stopgrad_ratio():
    log_probs = torch.tensor([-0.5, -0.5, -0.5], requires_grad=True)
    old = log_probs.detach() - torch.log(torch.tensor([1.5, 0.5, 1.0]))
    advantages = torch.tensor([1.0, 2.0, -1.0])
    loss, clipfrac = cispo_policy_loss(log_probs, old, advantages, eps_clip=0.2, eps_clip_high=0.28)
    weights = torch.tensor([1.28, 0.8, 1.0])  # clip(ρ, 0.8, 1.28)
    assert torch.allclose(loss, -weights * advantages * -0.5)
    assert torch.allclose(clipfrac, torch.tensor([1.0, 1.0, 0.0]))
    loss.sum().backward()
    assert torch.allclose(log_probs.grad, -weights * advantages)  # clipped tokens keep gradient


def test_opsm_drops_negative_advantage_tokens_of_samples_that_drifted_past_delta():
    log_probs = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -2.0, -3.0]], requires_grad=True)
    # sample 0: old - new = 0.3, 0.1 on its two trained tokens: d = 0.2 (the padding's 5.0 is ignored);
    # sample 1: 0.1 and -0.1: d = 0
    old = log_probs.detach() + torch.tensor([[0.3, 0.1, 5.0], [0.1, -0.1, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    advantages = torch.tensor([[-1.0, 1.0, -1.0], [-1.0, -1.0, -1.0]])
    keep = opsm_keep_mask(log_probs, old, advantages, mask, delta=0.1)
    assert keep.tolist() == [[0.0, 1.0, 0.0], [1.0, 1.0, 1.0]] and not keep.requires_grad
    assert opsm_keep_mask(log_probs, old, advantages, mask, delta=0.2 + 1e-6).eq(1).all()  # d must exceed delta
