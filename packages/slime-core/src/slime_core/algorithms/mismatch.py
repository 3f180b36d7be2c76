"""Correcting the rollout/train mismatch: the engine that sampled a response (π_rollout) and
the trainer's recomputation of the same policy (π_old) differ slightly (kernels, precision),
so tokens are reweighted by w = π_old / π_rollout.

Both corrections return ``(weights, metrics)``: weights (B, T), detached, to multiply into the
per-token policy loss, and metrics, a dict of scalar tensors reduced by ``reduce`` (default:
the masked mean over the micro-batch; pass a global-batch reduction to sum over micro-batches).

``TIS_FUNCTIONS`` maps ``--tis-mode`` names to the form every registered TIS function has
(``slime_register_tis_functions``), which may rewrite the per-token loss and reject tokens::

    tis_fn(pg_loss, inputs, config) -> (pg_loss, loss_mask, metrics)

``pg_loss`` (B, T) the per-token policy-gradient loss, ``inputs`` the micro-batch's
``PolicyLossInputs``, ``config`` its ``PolicyLossConfig``; it returns the corrected (B, T)
loss, the (B, T) mask the loss is reduced over (``inputs.loss_mask`` less the rejected
tokens; the denominators stay those of ``inputs.loss_mask``) and per-token (B, T) metrics,
which the loss reduces over ``inputs.loss_mask`` like itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from .kl import approx_kl
from .reduce import masked_mean

if TYPE_CHECKING:
    from slime_core.rank.policy_loss_config import PolicyLossConfig

Reduce = Callable[[torch.Tensor], torch.Tensor]


def tis_weights(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    loss_mask: torch.Tensor,
    clip: float = 2.0,
    clip_low: float = 0.0,
    reduce: Reduce | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Truncated importance sampling: w = clamp(exp(old - rollout), clip_low, clip).

    Metrics: tis_weight (mean w), tis_clipfrac (fraction of tokens clamped), tis_rollout_kl
    (low_var_kl estimate of KL(π_rollout‖π_old), the size of the mismatch).
    Shapes: log-probs and loss_mask (B, T) -> weights (B, T).
    """
    ratio = _ratio(old_log_probs, rollout_log_probs)  # (B, T)
    weights = ratio.clamp(clip_low, clip)
    return weights, _metrics("tis", weights, weights != ratio, old_log_probs, rollout_log_probs, loss_mask, reduce)


def icepop_weights(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    loss_mask: torch.Tensor,
    low: float = 0.5,
    high: float = 2.0,
    reduce: Reduce | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """ICEPOP: w = ρ inside [low, high] and 0 outside (the token is dropped), ρ = exp(old - rollout).

    Metrics: icepop_weight (mean w), icepop_zerofrac (fraction of tokens dropped),
    icepop_rollout_kl (as in ``tis_weights``).
    Shapes: log-probs and loss_mask (B, T) -> weights (B, T).
    """
    ratio = _ratio(old_log_probs, rollout_log_probs)  # (B, T)
    outside = (ratio < low) | (ratio > high)
    weights = torch.where(outside, torch.zeros_like(ratio), ratio)
    return weights, _metrics("icepop", weights, outside, old_log_probs, rollout_log_probs, loss_mask, reduce)


def _ratio(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor) -> torch.Tensor:
    return torch.exp(old_log_probs.detach().float() - rollout_log_probs.detach().float())


def _metrics(prefix, weights, changed, old_log_probs, rollout_log_probs, loss_mask, reduce):
    reduce = reduce or (lambda x: masked_mean(x, loss_mask))
    rollout_kl = approx_kl(rollout_log_probs.detach(), old_log_probs.detach(), "low_var_kl")
    fraction = "clipfrac" if prefix == "tis" else "zerofrac"
    return {
        f"{prefix}_weight": reduce(weights),
        f"{prefix}_{fraction}": reduce(changed.float()),
        f"{prefix}_rollout_kl": reduce(rollout_kl),
    }


def _per_token(values: torch.Tensor) -> torch.Tensor:
    """The identity ``reduce``: metrics stay (B, T), for the loss to reduce."""
    return values


def truncate_tis(
    pg_loss: torch.Tensor, inputs, config: PolicyLossConfig
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """``--tis-mode truncate``: pg_loss·w with ``tis_weights`` (bounds ``config.tis_clip_low``,
    ``config.tis_clip``); every token stays in the mask."""
    weights, metrics = tis_weights(
        inputs.old_log_probs,
        inputs.rollout_log_probs,
        inputs.loss_mask,
        clip=config.tis_clip,
        clip_low=config.tis_clip_low,
        reduce=_per_token,
    )
    return pg_loss * weights, inputs.loss_mask, metrics


def icepop_tis(
    pg_loss: torch.Tensor, inputs, config: PolicyLossConfig
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """``--tis-mode icepop``: pg_loss·w with ``icepop_weights`` (band ``config.tis_clip_low`` to
    ``config.tis_clip``); a dropped token has weight 0 but stays in the mask (its sample's
    denominator still counts it)."""
    weights, metrics = icepop_weights(
        inputs.old_log_probs,
        inputs.rollout_log_probs,
        inputs.loss_mask,
        low=config.tis_clip_low,
        high=config.tis_clip,
        reduce=_per_token,
    )
    return pg_loss * weights, inputs.loss_mask, metrics


TisFn = Callable[..., tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]]

TIS_FUNCTIONS: dict[str, TisFn] = {"truncate": truncate_tis, "icepop": icepop_tis}
