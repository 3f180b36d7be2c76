"""Reducing per-token losses to a scalar with global-batch denominators.

A global batch (one optimizer step) is split into micro-batches and across data-parallel
ranks. Each micro-batch's reduced loss is its *contribution* to the global-batch value: the
denominators are counted once over the whole global batch (``loss_denominators``), so the sum
of the contributions over micro-batches and ranks equals the loss of the whole batch.

Gradients: summing micro-batch losses (gradient accumulation) is exactly right on one rank.
Data-parallel gradient sync usually *averages* over ranks; multiply the loss by the DP world
size first (or sync with a sum) to keep the global value.

Reductions (``mode``):

- ``"sample_mean"`` (default): mean over samples of each sample's masked token mean,
  Σ_i (Σ_t l_it·m_it / Σ_t m_it) / N_samples.
- ``"token_mean"`` (``--calculate-per-token-loss``): Σ_it l_it·m_it / N_tokens.
- ``"constant"`` (Dr.GRPO): Σ_it l_it·m_it / (N_samples · L), L a fixed tokens-per-sample
  budget such as the maximum response length, so no sample's length rescales its tokens.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch

REDUCTIONS = ("sample_mean", "token_mean", "constant")


@dataclass(frozen=True)
class LossDenominators:
    num_samples: int  # samples in the global batch (all micro-batches, all DP ranks)
    num_tokens: int  # valid tokens (loss_mask == 1) in the global batch
    max_tokens_per_sample: int | None = None  # L of the "constant" reduction (Dr.GRPO)


def loss_denominators(
    loss_masks: torch.Tensor | Sequence[torch.Tensor],
    max_tokens_per_sample: int | None = None,
    group=None,
) -> LossDenominators:
    """Count samples and valid tokens of a rank's whole share of the global batch, summed
    over the data-parallel ``group`` (a ``torch.distributed`` process group) when given.

    ``loss_masks``: one (B, T) mask, or a list of them (one per micro-batch, T may differ); a
    1-D mask counts as one sample.
    """
    masks = [loss_masks] if isinstance(loss_masks, torch.Tensor) else list(loss_masks)
    samples = sum(1 if m.dim() == 1 else m.shape[0] for m in masks)
    tokens = sum(m.bool().sum() for m in masks)
    counts = torch.stack([torch.tensor(samples, device=tokens.device), tokens])  # (2,) int64
    if group is not None:
        counts = all_reduce_sum(counts, group)
    num_samples, num_tokens = counts.tolist()
    return LossDenominators(num_samples, num_tokens, max_tokens_per_sample)


def reduce_loss(
    per_token: torch.Tensor,
    loss_mask: torch.Tensor,
    denominators: LossDenominators,
    mode: str = "sample_mean",
) -> torch.Tensor:
    """This micro-batch's contribution to the global-batch loss (see the module docstring).

    Shapes: per_token, loss_mask (B, T) -> scalar. Masked positions contribute nothing, even
    when they hold inf or NaN.
    """
    mask = loss_mask.bool()
    masked = torch.where(mask, per_token, torch.zeros((), dtype=per_token.dtype, device=per_token.device))
    if mode == "sample_mean":
        lengths = mask.sum(-1).clamp(min=1)  # (B,)
        return (masked.sum(-1) / lengths).sum() / max(denominators.num_samples, 1)
    if mode == "token_mean":
        return masked.sum() / max(denominators.num_tokens, 1)
    if mode == "constant":
        if denominators.max_tokens_per_sample is None:
            raise ValueError(
                "the 'constant' loss reduction needs max_tokens_per_sample in the denominators; "
                "pass loss_denominators(..., max_tokens_per_sample=<max response length>)"
            )
        return masked.sum() / max(denominators.num_samples * denominators.max_tokens_per_sample, 1)
    raise ValueError(f"unknown loss reduction {mode!r}; valid reductions are {', '.join(REDUCTIONS)}")


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ v·m / Σ m over all positions (0 when the mask is empty); shapes (B, T) -> scalar."""
    mask = mask.bool()
    total = torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device)).sum()
    return total / mask.sum().clamp(min=1)


def all_reduce_sum(tensor: torch.Tensor, group) -> torch.Tensor:
    """A summed copy of ``tensor`` over the ``torch.distributed`` process ``group`` (no
    gradient flows through it)."""
    import torch.distributed as dist

    tensor = tensor.clone()
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    return tensor
