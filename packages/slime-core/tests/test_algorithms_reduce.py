import math

import pytest
import torch

from slime_core.algorithms import LossDenominators, loss_denominators, masked_mean, reduce_loss
from slime_core.algorithms.reduce import rollout_token_totals

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_reductions_by_hand():
    denominators = loss_denominators(MASK, max_tokens_per_sample=4)
    assert denominators == LossDenominators(num_samples=2, num_tokens=3, max_tokens_per_sample=4)
    # sample means 1.5 and 4; token sum 7 over 3 tokens; constant: 7 / (2·4)
    assert reduce_loss(LOSS, MASK, denominators, "sample_mean").item() == pytest.approx(2.75)
    assert reduce_loss(LOSS, MASK, denominators, "token_mean").item() == pytest.approx(7 / 3)
    assert reduce_loss(LOSS, MASK, denominators, "constant").item() == pytest.approx(0.875)


def test_masked_positions_contribute_nothing_even_when_not_finite():
    loss = LOSS.clone()
    loss[0, 2], loss[1, 1] = float("nan"), float("inf")
    for mode in ("sample_mean", "token_mean", "constant"):
        assert math.isfinite(reduce_loss(loss, MASK, LossDenominators(2, 3, 4), mode).item())
    assert masked_mean(loss, MASK).item() == pytest.approx(7 / 3)


@pytest.mark.parametrize("mode", ["sample_mean", "token_mean", "constant"])
def test_micro_batch_contributions_sum_to_the_whole_batch_value(mode):
    torch.manual_seed(0)
    lengths = torch.tensor([3, 8, 0, 5, 2, 7])  # right-padded responses; one is empty
    mask = (torch.arange(8) < lengths[:, None]).float()  # (6, 8)
    loss = torch.randn(6, 8)
    whole = reduce_loss(loss, mask, loss_denominators(mask, max_tokens_per_sample=8), mode)
    # micro-batches of different sizes, each padded only to its own longest response
    micro = [(loss[:1, :3], mask[:1, :3]), (loss[1:4], mask[1:4]), (loss[4:, :7], mask[4:, :7])]
    denominators = loss_denominators([m for _, m in micro], max_tokens_per_sample=8)
    assert denominators == loss_denominators(mask, max_tokens_per_sample=8)
    summed = sum(reduce_loss(loss, m, denominators, mode) for loss, m in micro)
    assert summed.item() == pytest.approx(whole.item(), rel=1e-6)
    # the micro-batch's own mean would be wrong: denominators must be global
    assert reduce_loss(*micro[0], loss_denominators(micro[0][1], 8), mode).item() != pytest.approx(
        reduce_loss(*micro[0], denominators, mode).item()
    )


def test_constant_reduction_needs_the_constant_and_unknown_modes_are_errors():
    with pytest.raises(ValueError, match="max_tokens_per_sample"):
        reduce_loss(LOSS, MASK, LossDenominators(2, 3), "constant")
    with pytest.raises(ValueError, match="sample_mean, token_mean, constant"):
        reduce_loss(LOSS, MASK, LossDenominators(2, 3), "mean")


def test_one_dimensional_masks_count_as_one_sample_each():
    assert loss_denominators([torch.tensor([1, 1, 0]), torch.tensor([1, 0])]) == LossDenominators(2, 3)


def test_a_sample_with_no_trained_token_counts_as_one_token():
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    denominators = loss_denominators(mask)
    assert denominators == LossDenominators(num_samples=2, num_tokens=3)  # slime: Σ max(tokens, 1) = 2 + 1
    assert reduce_loss(LOSS, mask, denominators, "token_mean").item() == pytest.approx((1 + 2) / 3)
    assert reduce_loss(LOSS, mask, denominators, "sample_mean").item() == pytest.approx((1.5 + 0) / 2)


def test_rollouts_of_several_samples_share_one_denominator_and_count_once():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    ids = [7, 7, 9, 4]
    assert rollout_token_totals(mask, ids).tolist() == [3.0, 3.0, 3.0, 0.0]
    denominators = loss_denominators(mask, rollout_ids=ids)
    assert (denominators.num_samples, denominators.num_tokens) == (3, 2 + 1 + 3 + 1)
    loss = torch.tensor([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0], [3.0, 3.0, 6.0], [9.0, 9.0, 9.0]])
    value = reduce_loss(loss, mask, denominators, "sample_mean", sample_tokens=rollout_token_totals(mask, ids))
    # rollout 7: (1 + 2 + 4) / 3; rollout 9: 12 / 3; rollout 4 has no token: 0; three rollouts
    assert value.item() == pytest.approx((7 / 3 + 4 + 0) / 3)
