"""Reducing per-token losses to a scalar with global-batch denominators.

A global batch (one optimizer step) is split into micro-batches and across data-parallel
ranks. Each micro-batch's reduced loss is its *contribution* to the global-batch value: the
denominators are counted once over the whole global batch (``loss_denominators``), so the sum
of the contributions over micro-batches and ranks equals the loss of the whole batch.

Gradients: summing micro-batch losses (gradient accumulation) is exactly right on one rank.
Data-parallel gradient sync usually *averages* over ranks; multiply the loss by the DP world
size first (or sync with a sum) to keep the global value.

Reductions (``mode``), with m_it the loss mask:

- ``"sample_mean"`` (default): mean over samples of each sample's masked token mean,
  Σ_i (Σ_t l_it·m_it / max(D_i, 1)) / N_samples, D_i = Σ_t m_it.
- ``"token_mean"`` (``--calculate-per-token-loss``): Σ_it l_it·m_it / N_tokens, where
  N_tokens = Σ_i max(Σ_t m_it, 1): as in slime, a sample with no trained token still counts
  as one token.
- ``"constant"`` (Dr.GRPO): Σ_it l_it·m_it / (N_samples · L), L a fixed tokens-per-sample
  budget such as the maximum response length, so no sample's length rescales its tokens.

Multi-sample rollouts (slime's per-rollout denominators): when several samples come from one
rollout (``rollout_ids``), the sample mean treats them as one sample: each carries D_i = the
trained tokens of all of its rollout's samples in the global batch (``rollout_token_totals``),
and N_samples counts the rollout once, so the rollout contributes one token mean.
"""

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

REDUCTIONS = ("sample_mean", "token_mean", "constant")


@dataclass(frozen=True)
class LossDenominators:
    num_samples: int  # samples in the global batch (all micro-batches, all DP ranks); a rollout once
    num_tokens: int  # Σ over those samples of max(valid tokens, 1)
    max_tokens_per_sample: int | None = None  # L of the "constant" reduction (Dr.GRPO)


def loss_denominators(
    loss_masks: torch.Tensor | Sequence[torch.Tensor],
    max_tokens_per_sample: int | None = None,
    group=None,
    rollout_ids: Sequence[Hashable] | None = None,
) -> LossDenominators:
    """Count samples and tokens of a rank's whole share of the global batch, summed over the
    data-parallel ``group`` (a ``torch.distributed`` process group) when given.

    ``loss_masks``: one (B, T) mask, or a list of them (one per micro-batch, T may differ); a
    1-D mask counts as one sample. ``rollout_ids``: one id per sample (in the order of the
    masks' rows); samples sharing an id count as one sample. A rollout's samples must all be
    on this rank, or it is counted once per rank.
    """
    masks = [loss_masks] if isinstance(loss_masks, torch.Tensor) else list(loss_masks)
    rows = [m.unsqueeze(0) if m.dim() == 1 else m for m in masks]  # (B, T) each
    samples = sum(r.shape[0] for r in rows) if rollout_ids is None else len(set(rollout_ids))
    tokens = torch.as_tensor(sum(r.bool().sum(-1).clamp(min=1).sum() for r in rows))
    counts = torch.stack([torch.tensor(samples, device=tokens.device), tokens])  # (2,) int64
    if group is not None:
        counts = all_reduce_sum(counts, group)
    num_samples, num_tokens = counts.tolist()
    return LossDenominators(num_samples, num_tokens, max_tokens_per_sample)


def rollout_token_totals(loss_mask: torch.Tensor, rollout_ids: Sequence[Hashable]) -> torch.Tensor:
    """Each sample's sample-mean denominator when samples of one rollout share it: the trained
    tokens of every sample with its rollout id (slime's ``rollout_mask_sums``).

    Pass the rows of one global batch (an optimizer step): counted per micro-batch, a rollout
    split across micro-batches would get a partial denominator in each.
    Shapes: loss_mask (N, T), rollout_ids (N,) -> (N,) float.
    """
    index: dict[Hashable, int] = {}
    rollout = torch.tensor([index.setdefault(r, len(index)) for r in rollout_ids], dtype=torch.long)  # (N,)
    rollout = rollout.to(loss_mask.device)
    per_sample = loss_mask.bool().sum(-1).float()  # (N,)
    totals = torch.zeros(len(index), device=loss_mask.device).index_add_(0, rollout, per_sample)  # (rollouts,)
    return totals[rollout]


def reduce_loss(
    per_token: torch.Tensor,
    loss_mask: torch.Tensor,
    denominators: LossDenominators,
    mode: str = "sample_mean",
    sample_tokens: torch.Tensor | None = None,
) -> torch.Tensor:
    """This micro-batch's contribution to the global-batch loss (see the module docstring).

    ``sample_tokens``: (B,) the token count each row's sum is divided by in ``"sample_mean"``
    (default: the row's own trained tokens; ``rollout_token_totals`` for multi-sample rollouts).
    Shapes: per_token, loss_mask (B, T) -> scalar. Masked positions contribute nothing, even
    when they hold inf or NaN.
    """
    mask = loss_mask.bool()
    masked = torch.where(mask, per_token, torch.zeros((), dtype=per_token.dtype, device=per_token.device))
    if mode == "sample_mean":
        lengths = mask.sum(-1) if sample_tokens is None else sample_tokens.to(masked.device)  # (B,)
        return (masked.sum(-1) / lengths.clamp(min=1)).sum() / max(denominators.num_samples, 1)
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
