import torch

from slime_core.algorithms import value_loss


def test_value_loss_takes_the_larger_of_clipped_and_unclipped_errors():
    values = torch.tensor([1.5, 1.1, 0.5, 1.5])
    old_values = torch.tensor([1.0, 1.0, 1.0, 1.0])
    returns = torch.tensor([2.0, 2.0, 0.0, 1.0])
    loss, clipfrac = value_loss(values, old_values, returns, value_clip=0.2)
    # V_clip = [1.2, 1.1, 0.8, 1.2]; (V_clip-R)² = [.64, .81, .64, .04]; (V-R)² = [.25, .81, .25, .25]
    assert torch.allclose(loss, torch.tensor([0.64, 0.81, 0.64, 0.25]))
    assert torch.allclose(clipfrac, torch.tensor([1.0, 0.0, 1.0, 0.0]))


def test_value_loss_gradient_is_zero_when_the_clipped_term_wins():
    values = torch.tensor([1.5, 1.1], requires_grad=True)
    loss, _ = value_loss(values, torch.ones(2), torch.tensor([2.0, 2.0]), value_clip=0.2)
    loss.sum().backward()
    assert torch.allclose(values.grad, torch.tensor([0.0, 2 * (1.1 - 2.0)]))
