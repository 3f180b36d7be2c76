"""The total policy loss of a micro-batch, and the SFT loss.

policy loss = pg_loss - entropy_coef·entropy + kl_loss_coef·kl_loss, each term reduced to its
global-batch contribution (``reduce.reduce_loss``), so summing the loss and the metrics over
micro-batches and data-parallel ranks gives the global-batch values.

Three policies can be in play: π (being trained), π_old (the trainer's recomputation of the
policy that sampled) and π_rollout (the engine's log-probs of the same tokens). The PPO ratio
ρ = π/π_old, or π/π_rollout with ``use_rollout_logprobs``; the mismatch weights (``use_tis``,
metrics with ``get_mismatch_metrics``) are always π_old/π_rollout.

Two parts of the pg term are plugins besides the loss itself: the TIS function
(``--tis-mode NAME``, ``mismatch.TIS_FUNCTIONS`` and ``slime_register_tis_functions``) and the
pg-loss reducer (``--pg-loss-reducer NAME``, ``slime_register_pg_loss_reducers``), which
reduces the pg term alone, the other terms keeping the configured reduction::

    reducer(pg_loss, loss_mask, inputs, denominators, config) -> scalar

``pg_loss`` (B, T) after the TIS function, ``loss_mask`` (B, T) the TIS function's mask,
``inputs`` / ``denominators`` / ``config`` as given to ``compute_policy_loss``; it returns
the micro-batch's contribution to the global-batch pg loss, as ``reduce.reduce_loss`` does.
"""

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from slime_core.rank.policy_loss_config import PolicyLossConfig

from .kl import approx_kl
from .mismatch import TIS_FUNCTIONS, TisFn
from .policy_loss import POLICY_LOSSES, PolicyLossFn, opsm_keep_mask
from .reduce import LossDenominators, reduce_loss

PgLossReducer = Callable[..., torch.Tensor]


@dataclass
class PolicyLossInputs:
    log_probs: torch.Tensor  # (B, T) log π(y_t) of the policy being trained, with gradient
    old_log_probs: torch.Tensor  # (B, T) the trainer's log π_old(y_t): ρ's anchor (see use_rollout_logprobs)
    advantages: torch.Tensor  # (B, T)
    loss_mask: torch.Tensor  # (B, T) 1 on tokens trained on
    entropy: torch.Tensor | None = None  # (B, T) with gradient; needed when entropy_coef != 0
    ref_log_probs: torch.Tensor | None = None  # (B, T) log π_ref; needed with use_kl_loss
    rollout_log_probs: torch.Tensor | None = None  # (B, T) the engine's; needed by config.needs_rollout_log_probs
    sample_tokens: torch.Tensor | None = None  # (B,) sample-mean denominators (None: each row's own tokens)
    response_lengths: torch.Tensor | None = None  # (B,) int, response tokens of each row (the rest is padding)
    total_lengths: torch.Tensor | None = None  # (B,) int, prompt + response tokens of each row's sample


def compute_policy_loss(
    inputs: PolicyLossInputs,
    config: PolicyLossConfig,
    denominators: LossDenominators,
    loss_fn: PolicyLossFn | None = None,
    tis_fn: TisFn | None = None,
    pg_loss_reducer: PgLossReducer | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """loss = pg_loss - entropy_coef·entropy + kl_loss_coef·kl_loss for one micro-batch.

    pg_loss is ``loss_fn`` (default ``POLICY_LOSSES[config.loss_type]``) with ρ against π_old
    (π_rollout with use_rollout_logprobs), times the OPSM mask with use_opsm, corrected by
    ``tis_fn`` (default ``TIS_FUNCTIONS[config.tis_mode]``) with use_tis, and reduced by
    ``pg_loss_reducer`` when given (else like the other terms). Returns the scalar loss and float metrics, all
    global-batch
    contributions: loss, pg_loss, pg_clipfrac, ppo_kl (mean of anchor - new log-prob), entropy
    (when given), kl_loss (with use_kl_loss), opsm_clipfrac (with use_opsm: the share of tokens
    OPSM dropped), the TIS function's metrics (tis_*/icepop_* for the built-ins; with use_tis or
    get_mismatch_metrics) and
    train_rollout_logprob_abs_diff (whenever rollout log-probs are given).

    get_mismatch_metrics only reports: it never reweights the loss. That is slime's documented
    behaviour; slime's code does pass the loss through a TIS function whenever the flag is set,
    but requires ``--custom-tis-function-path`` with it, and its example function reweights
    only under its own ``use_tis``.
    """
    _check_inputs(inputs, config)
    reduce = partial(
        reduce_loss,
        loss_mask=inputs.loss_mask,
        denominators=denominators,
        mode=config.reduction,
        sample_tokens=inputs.sample_tokens,
    )
    pg_parts = (
        loss_fn or _lookup(POLICY_LOSSES, config.loss_type, "policy loss"),
        tis_fn or _lookup(TIS_FUNCTIONS, config.tis_mode, "TIS function"),
        pg_loss_reducer or partial(_reduce_pg_loss, mode=config.reduction),
    )
    loss, metrics = _pg_loss(inputs, config, denominators, pg_parts, reduce)
    if inputs.entropy is not None:
        metrics["entropy"] = reduce(inputs.entropy)
        loss = loss - config.entropy_coef * metrics["entropy"]
    if config.use_kl_loss:
        metrics["kl_loss"] = reduce(_kl_loss(inputs, config))
        loss = loss + config.kl_loss_coef * metrics["kl_loss"]
    if inputs.rollout_log_probs is not None:
        metrics["train_rollout_logprob_abs_diff"] = reduce(_rollout_gap(inputs, config))
    metrics["loss"] = loss
    return loss, _to_floats(metrics)


def sft_loss(
    log_probs: torch.Tensor,
    loss_mask: torch.Tensor,
    denominators: LossDenominators,
    reduction: str = "sample_mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Supervised fine-tuning loss: -log π(y_t) reduced over the loss mask (by default the
    mean over samples of each sample's token mean). Shapes: (B, T) -> scalar, {"sft_loss"}."""
    loss = reduce_loss(-log_probs, loss_mask, denominators, reduction)
    return loss, _to_floats({"sft_loss": loss})


def _pg_loss(inputs: PolicyLossInputs, config: PolicyLossConfig, denominators: LossDenominators, pg_parts, reduce):
    """The reduced policy-gradient term, and its metrics (pg_*, ppo_kl, OPSM, the TIS function's).
    ``pg_parts``: the policy loss, TIS function and pg-loss reducer."""
    loss_fn, tis_fn, pg_loss_reducer = pg_parts
    anchor = _ratio_anchor(inputs, config)
    pg, clipfrac = loss_fn(inputs.log_probs, anchor, inputs.advantages, inputs.loss_mask, config)
    metrics = {"pg_clipfrac": reduce(clipfrac), "ppo_kl": reduce((anchor - inputs.log_probs).detach())}
    if config.use_opsm:
        keep = opsm_keep_mask(inputs.log_probs, anchor, inputs.advantages, inputs.loss_mask, config.opsm_delta)
        pg = pg * keep
        metrics["opsm_clipfrac"] = reduce(1.0 - keep)
    pg_mask = inputs.loss_mask
    if config.use_tis or config.get_mismatch_metrics:
        corrected, corrected_mask, per_token = tis_fn(pg, inputs, config)
        metrics.update({name: reduce(value.detach()) for name, value in per_token.items()})
        if config.use_tis:
            pg, pg_mask = corrected, corrected_mask
    metrics["pg_loss"] = pg_loss_reducer(pg, pg_mask, inputs, denominators, config)
    return metrics["pg_loss"], metrics


def _reduce_pg_loss(
    pg_loss, loss_mask, inputs: PolicyLossInputs, denominators: LossDenominators, config: PolicyLossConfig, mode: str
):
    """The default pg-loss reduction: ``mode`` over ``loss_mask``, each sample still divided by
    its tokens in ``inputs.loss_mask`` (a TIS function's rejections shrink the sum, not the
    denominator)."""
    sample_tokens = inputs.sample_tokens if inputs.sample_tokens is not None else inputs.loss_mask.bool().sum(-1)
    return reduce_loss(pg_loss, loss_mask, denominators, mode, sample_tokens=sample_tokens)


def _ratio_anchor(inputs: PolicyLossInputs, config: PolicyLossConfig) -> torch.Tensor:
    """The log-probs ρ is measured against: π_rollout with use_rollout_logprobs, else π_old."""
    return inputs.rollout_log_probs if config.use_rollout_logprobs else inputs.old_log_probs


def _rollout_gap(inputs: PolicyLossInputs, config: PolicyLossConfig) -> torch.Tensor:
    """|log π_train - log π_rollout| per token, π_train the trainer's π_old, or (as in slime)
    the current π with use_rollout_logprobs, where π_old is not the ratio's anchor."""
    train = inputs.log_probs if config.use_rollout_logprobs else inputs.old_log_probs
    return (train.detach() - inputs.rollout_log_probs).abs()


def _kl_loss(inputs: PolicyLossInputs, config: PolicyLossConfig) -> torch.Tensor:
    anchor = _ratio_anchor(inputs, config)
    ratio = torch.exp(inputs.log_probs - anchor) if config.use_unbiased_kl else None
    return approx_kl(inputs.log_probs, inputs.ref_log_probs, config.kl_loss_type, importance_ratio=ratio)


def _lookup(table: dict, name: str, label: str):
    """``table[name]``, or an error listing the built-in names (a plugin's is passed in instead)."""
    if name in table:
        return table[name]
    close = difflib.get_close_matches(name, table, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown {label} {name!r}; the built-in ones are {', '.join(table)}.{hint}")


def _check_inputs(inputs: PolicyLossInputs, config: PolicyLossConfig) -> None:
    needs = [
        ("entropy", config.entropy_coef != 0, "entropy_coef != 0"),
        ("ref_log_probs", config.use_kl_loss, "use_kl_loss"),
        ("rollout_log_probs", config.needs_rollout_log_probs, "use_tis, get_mismatch_metrics or use_rollout_logprobs"),
    ]
    missing = [
        f"{reason} needs PolicyLossInputs.{name}"
        for name, needed, reason in needs
        if needed and getattr(inputs, name) is None
    ]
    if missing:
        raise ValueError("missing policy loss inputs: " + "; ".join(missing))


def _to_floats(metrics: dict[str, torch.Tensor]) -> dict[str, float]:
    """One device sync for all metrics."""
    values = torch.stack([value.detach().float().reshape(()) for value in metrics.values()]).tolist()
    return dict(zip(metrics, values))
