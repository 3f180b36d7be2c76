import torch

from slime_core.algorithms import value_loss


def test_value_loss_takes_the_larger_of_clipped_and_unclipped_errors():
    values = torch.tensor([1.5, 1.1, 0.5, 1.5])
    old_values = torch.tensor([1.0, 1.0, 1.0, 1.0])
    returns = torch.tensor([2.0, 2.0, 0.0, 1.0])
    loss, _ = value_loss(values, old_values, returns, value_clip=0.2)
    # V_clip = [1.2, 1.1, 0.8, 1.2]; (V_clip-R)² = [.64, .81, .64, .04]; (V-R)² = [.25, .81, .25, .25]
    assert torch.allclose(loss, torch.tensor([0.64, 0.81, 0.64, 0.25]))


def test_value_clipfrac_counts_values_that_moved_past_the_clip_range():
    """As THUDM slime: |V - V_old| > c, whichever error term is larger. The last token moved
    by .5 but its unclipped error wins (the old count, clipped term larger, gave 0 there)."""
    values = torch.tensor([1.5, 1.1, 0.5, 1.5])
    old_values = torch.ones(4)
    _, clipfrac = value_loss(values, old_values, torch.tensor([2.0, 2.0, 0.0, 1.0]), value_clip=0.2)
    assert torch.equal(clipfrac, torch.tensor([1.0, 0.0, 1.0, 1.0]))


def test_value_loss_gradient_is_zero_when_the_clipped_term_wins():
    values = torch.tensor([1.5, 1.1], requires_grad=True)
    loss, _ = value_loss(values, torch.ones(2), torch.tensor([2.0, 2.0]), value_clip=0.2)
    loss.sum().backward()
    assert torch.allclose(values.grad, torch.tensor([0.0, 2 * (1.1 - 2.0)]))
