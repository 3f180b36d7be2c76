import math

import torch

from slime_core.algorithms import icepop_weights, tis_weights

RATIOS = torch.tensor([[0.5, 1.0, 3.0, 0.1, 50.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])  # the last token is padding


def _log_probs():
    rollout = torch.full((1, 5), -2.0)
    return rollout + RATIOS.log(), rollout


def test_tis_clamps_the_ratio_and_reports_masked_metrics():
    old, rollout = _log_probs()
    weights, metrics = tis_weights(old, rollout, MASK, clip=2.0, clip_low=0.2)
    assert torch.allclose(weights, torch.tensor([[0.5, 1.0, 2.0, 0.2, 2.0]]))
    assert math.isclose(metrics["tis_weight"].item(), (0.5 + 1 + 2 + 0.2) / 4, rel_tol=1e-6)
    assert math.isclose(metrics["tis_clipfrac"].item(), 0.5)
    assert metrics["tis_rollout_kl"].item() > 0


def test_icepop_zeroes_tokens_outside_the_band_and_keeps_the_ratio_inside():
    old, rollout = _log_probs()
    weights, metrics = icepop_weights(old, rollout, MASK, low=0.4, high=2.0)
    assert torch.allclose(weights, torch.tensor([[0.5, 1.0, 0.0, 0.0, 0.0]]))
    assert math.isclose(metrics["icepop_zerofrac"].item(), 0.5)
    assert math.isclose(metrics["icepop_weight"].item(), 1.5 / 4, rel_tol=1e-6)


def test_weights_carry_no_gradient_and_no_mismatch_gives_weight_one():
    log_probs = torch.randn(2, 3, requires_grad=True)
    weights, metrics = tis_weights(log_probs, log_probs.detach(), torch.ones(2, 3))
    assert not weights.requires_grad and torch.equal(weights, torch.ones(2, 3))
    assert metrics["tis_clipfrac"].item() == 0 and metrics["tis_rollout_kl"].item() == 0


def test_a_custom_reduce_is_used_for_the_metrics():
    old, rollout = _log_probs()
    _, metrics = tis_weights(old, rollout, MASK, reduce=lambda x: (x * MASK).sum())
    assert math.isclose(metrics["tis_clipfrac"].item(), 1.0)  # only the 3.0 is clamped (to 2)
