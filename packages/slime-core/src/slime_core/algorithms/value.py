"""Clipped value (critic) loss for PPO."""

import torch


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, value_clip: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped value loss.

    V_clip = V_old + clamp(V - V_old, -c, c);  loss = max((V_clip - R)², (V - R)²)

    Shapes: values, old_values, returns (B, T) -> loss (B, T), clipfrac (B, T) float, 1 where
    |V - V_old| > c, i.e. where the clip moved the value, whichever term won (THUDM slime's
    ``value_clipfrac``). Reduce with the loss mask (``reduce.reduce_loss``).
    """
    clipped_values = old_values + (values - old_values).clamp(-value_clip, value_clip)  # (B, T)
    loss = torch.maximum((values - returns).square(), (clipped_values - returns).square())
    return loss, ((values - old_values).abs() > value_clip).float()
