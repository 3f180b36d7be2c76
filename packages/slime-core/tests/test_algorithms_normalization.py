import math

import pytest
import torch

from slime_core.algorithms import whiten


def test_whiten_by_hand_uses_the_unbiased_variance_and_ignores_masked_values():
    values = torch.tensor([[1.0, 2.0], [3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    # mean 2, unbiased variance ((-1)² + 0² + 1²) / (3 - 1) = 1 (the population one is 2/3)
    s = 1 / math.sqrt(1 + 1e-8)
    assert torch.allclose(whiten(values, mask), torch.tensor([[-s, 0.0], [s, 0.0]]))


def test_whitened_values_have_zero_mean_and_unit_unbiased_variance_over_the_mask():
    torch.manual_seed(0)
    values = 5 + 3 * torch.randn(4, 9)
    mask = (torch.rand(4, 9) > 0.3).float()
    out = whiten(values, mask)
    valid = out[mask == 1]
    assert abs(valid.mean().item()) < 1e-5 and abs(valid.var(unbiased=True).item() - 1) < 1e-4
    assert (out[mask == 0] == 0).all()


def test_without_shift_mean_the_mean_is_added_back():
    values, mask = torch.tensor([[1.0, 3.0, 7.0]]), torch.tensor([[1.0, 1.0, 0.0]])
    # mean 2, unbiased variance 2: (v - 2)/√2 + 2
    s = 1 / math.sqrt(2 + 1e-8)
    assert torch.allclose(whiten(values, mask, shift_mean=False), torch.tensor([[2 - s, 2 + s, 0.0]]))


def test_a_single_valid_token_uses_the_population_variance():
    out = whiten(torch.tensor([[3.0, 8.0]]), torch.tensor([[1.0, 0.0]]), shift_mean=False)
    assert torch.allclose(out, torch.tensor([[3.0, 0.0]]))  # σ² = 0: (3 - 3)·1e4 + 3


def test_constant_values_stay_finite():
    assert torch.equal(whiten(torch.full((2, 3), 4.0), torch.ones(2, 3)), torch.zeros(2, 3))


def test_an_all_masked_batch_is_an_error_that_names_the_option():
    with pytest.raises(ValueError, match="--normalize-advantages: every loss mask of the rollout is 0"):
        whiten(torch.ones(2, 3), torch.zeros(2, 3))
