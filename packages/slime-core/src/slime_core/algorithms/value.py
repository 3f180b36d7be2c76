"""Clipped value (critic) loss for PPO."""

import torch


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, value_clip: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped value loss.

    V_clip = V_old + clamp(V - V_old, -c, c);  loss = max((V_clip - R)², (V - R)²)

    Shapes: values, old_values, returns (B, T) -> loss (B, T), clipfrac (B, T) float, 1 where
    the clipped term was the larger one. Reduce with the loss mask (``reduce.reduce_loss``).
    """
    clipped_values = old_values + (values - old_values).clamp(-value_clip, value_clip)  # (B, T)
    unclipped_loss = (values - returns).square()
    clipped_loss = (clipped_values - returns).square()
    return torch.maximum(unclipped_loss, clipped_loss), (clipped_loss > unclipped_loss).float()
