"""``--reset-optimizer-states``: a rank's optimizer starts each rollout's training afresh.

THUDM slime zeroes Adam's step counts and first and second moments before every rollout's
training; the learning-rate schedule goes on. Zeroing in place keeps the state where it is
(device or CPU, sharded or not), so the next step is Adam's first: its update is
``lr * m̂ / (sqrt(v̂) + eps)`` with ``m̂ = g`` and ``v̂ = g²``, about ``lr`` per element.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def reset_optimizer_states(optimizers: Iterable[torch.optim.Optimizer]) -> None:
    """Zero every tensor of each optimizer's per-parameter state (moments, step counts) and
    any step count kept per parameter group."""
    with torch.no_grad():
        for optimizer in optimizers:
            for group in optimizer.param_groups:
                if "step" in group:
                    group["step"] = 0
            for state in optimizer.state.values():
                for key, value in state.items():
                    if isinstance(value, torch.Tensor):
                        value.zero_()
                    elif key == "step":
                        state[key] = 0
