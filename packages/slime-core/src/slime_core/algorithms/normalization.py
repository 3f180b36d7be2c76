"""Masked whitening of advantages over a (possibly data-parallel) batch."""

import torch

from .reduce import all_reduce_sum


def whiten(
    values: torch.Tensor, mask: torch.Tensor, group=None, shift_mean: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """(values - μ) / sqrt(σ² + eps) on valid tokens, 0 elsewhere (``--normalize-advantages``).

    μ = Σ v·m / Σ m and σ² = Σ (v - μ)²·m / (Σ m - 1), the unbiased variance over every valid
    token (with a single valid token, σ² = 0), as THUDM slime. ``shift_mean=False`` adds μ
    back, so only the spread is normalised (no option selects it: slime's trainer always
    shifts). With a ``torch.distributed`` process ``group``, the sums run over all its ranks,
    so the result equals whitening the ranks' data concatenated. The statistics carry no
    gradient (this is for advantages).

    Shapes: values, mask (B, T) -> (B, T). Raises ValueError when no token is valid on any rank.
    """
    mask = mask.to(values.dtype)
    sums = _sum_over(torch.stack([(values * mask).sum(), mask.sum()]).detach(), group)  # (2,)
    count = sums[1]
    if count == 0:
        raise ValueError(
            "--normalize-advantages: every loss mask of the rollout is 0 (on every data-parallel rank), so the "
            "advantages have no mean or variance to whiten with; check what masks whole samples "
            "(--sample-filter, --mask-offpolicy-in-partial-rollout), or drop --normalize-advantages"
        )
    mean = sums[0] / count
    square_sum = _sum_over(((values - mean).square() * mask).sum().detach(), group)
    var = square_sum / (count - 1).clamp(min=1)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    return (whitened if shift_mean else whitened + mean) * mask


def _sum_over(x: torch.Tensor, group) -> torch.Tensor:
    """``x`` summed over the ranks of ``group``; ``x`` itself without one."""
    return x if group is None else all_reduce_sum(x, group)
