"""Masked whitening of advantages over a (possibly data-parallel) batch."""

import torch

from .reduce import all_reduce_sum


def whiten(
    values: torch.Tensor, mask: torch.Tensor, group=None, eps: float = 1e-8
) -> torch.Tensor:
    """(values - μ) / sqrt(σ² + eps) on valid tokens, 0 elsewhere (``--normalize-advantages``).

    μ = Σ v·m / Σ m and σ² = Σ (v - μ)²·m / Σ m (population variance) over every valid token;
    with a ``torch.distributed`` process ``group``, the sums run over all its ranks, so the
    result equals whitening the ranks' data concatenated. The statistics carry no gradient
    (this is for advantages).

    Shapes: values, mask (B, T) -> (B, T).
    """
    mask = mask.to(values.dtype)
    sums = torch.stack([(values * mask).sum(), mask.sum()]).detach()  # (2,)
    if group is not None:
        sums = all_reduce_sum(sums, group)
    mean = sums[0] / sums[1].clamp(min=1)
    square_sum = ((values - mean).square() * mask).sum().detach()
    if group is not None:
        square_sum = all_reduce_sum(square_sum, group)
    var = square_sum / sums[1].clamp(min=1)
    return (values - mean) * torch.rsqrt(var + eps) * mask
