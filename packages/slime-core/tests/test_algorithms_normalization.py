import math

import torch

from slime_core.algorithms import whiten


def test_whiten_by_hand_ignores_masked_values():
    values = torch.tensor([[1.0, 2.0], [3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    # mean 2, population variance 2/3
    s = 1 / math.sqrt(2 / 3 + 1e-8)
    assert torch.allclose(whiten(values, mask), torch.tensor([[-s, 0.0], [s, 0.0]]))


def test_whitened_values_have_zero_mean_and_unit_variance_over_the_mask():
    torch.manual_seed(0)
    values = 5 + 3 * torch.randn(4, 9)
    mask = (torch.rand(4, 9) > 0.3).float()
    out = whiten(values, mask)
    valid = out[mask == 1]
    assert abs(valid.mean().item()) < 1e-5 and abs(valid.var(unbiased=False).item() - 1) < 1e-4
    assert (out[mask == 0] == 0).all()


def test_constant_values_stay_finite():
    assert torch.equal(whiten(torch.full((2, 3), 4.0), torch.ones(2, 3)), torch.zeros(2, 3))
