import math

import pytest
import torch

from slime_core.algorithms import KL_KINDS, approx_kl

LN2 = math.log(2.0)


def _pairs(log_ratios):
    ref = torch.tensor([-1.0] * len(log_ratios))
    return ref + torch.tensor(log_ratios), ref


def test_k1_and_k2_are_the_log_ratio_and_half_its_square():
    log_probs, ref = _pairs([0.0, LN2, -LN2])
    assert torch.allclose(approx_kl(log_probs, ref, "k1"), torch.tensor([0.0, LN2, -LN2]))
    assert torch.allclose(approx_kl(log_probs, ref, "k2"), torch.tensor([0.0, LN2**2 / 2, LN2**2 / 2]))


def test_k3_is_exp_of_minus_r_minus_one_plus_r():
    log_probs, ref = _pairs([0.0, LN2, -LN2])
    # r = ln2: 1/2 - 1 + ln2;  r = -ln2: 2 - 1 - ln2
    expected = torch.tensor([0.0, 0.5 - 1 + LN2, 2 - 1 - LN2])
    assert torch.allclose(approx_kl(log_probs, ref, "k3"), expected)
    assert torch.allclose(approx_kl(log_probs, ref, "low_var_kl"), expected)


def test_low_var_kl_is_clamped_to_ten_but_k3_is_not():
    log_probs, ref = _pairs([-5.0, 15.0])
    # k3(-5) = e^5 - 6 = 142.4; k3(15) = e^-15 + 14
    assert torch.allclose(approx_kl(log_probs, ref, "k3"), torch.tensor([math.exp(5) - 6, math.exp(-15) + 14]))
    assert torch.allclose(approx_kl(log_probs, ref, "low_var_kl"), torch.tensor([10.0, 10.0]))


def test_importance_ratio_multiplies_before_the_clamp():
    log_probs, ref = _pairs([LN2, -5.0])
    ratio = torch.tensor([3.0, 0.01])
    got = approx_kl(log_probs, ref, "low_var_kl", importance_ratio=ratio)
    # 3·(1/2 - 1 + ln2) unclamped; 0.01·142.41 = 1.4241 is inside the clamp after weighting
    assert torch.allclose(got, torch.tensor([3 * (LN2 - 0.5), 0.01 * (math.exp(5) - 6)]))
    assert torch.allclose(approx_kl(log_probs, ref, "k1", importance_ratio=ratio), torch.tensor([3 * LN2, -0.05]))


def test_k3_is_non_negative():
    log_probs, ref = torch.randn(1000) * 3, torch.randn(1000) * 3
    assert (approx_kl(log_probs, ref, "k3") >= 0).all()


def test_low_var_kl_stays_finite_with_finite_gradient_for_extreme_ratios():
    log_probs = torch.tensor([-1000.0, 1000.0, 0.3], requires_grad=True)
    kl = approx_kl(log_probs, torch.zeros(3), "low_var_kl")
    kl.sum().backward()
    assert torch.allclose(kl[:2].detach(), torch.tensor([10.0, 10.0]))
    assert torch.isfinite(log_probs.grad).all()
    assert log_probs.grad[2] == pytest.approx(1 - math.exp(-0.3))  # d/dr (e^-r - 1 + r)


def test_unknown_kind_names_the_valid_kinds():
    with pytest.raises(ValueError) as error:
        approx_kl(torch.zeros(2), torch.zeros(2), "k4")
    for kind in KL_KINDS:
        assert kind in str(error.value)
