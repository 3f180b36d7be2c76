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
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Any, Callable

import torch

from .kl import KL_KINDS, approx_kl
from .mismatch import TIS_FUNCTIONS, TisFn
from .policy_loss import POLICY_LOSSES, PolicyLossFn, opsm_keep_mask
from .reduce import LossDenominators, reduce_loss

PgLossReducer = Callable[..., torch.Tensor]
#: Advantage estimators whose name is also the policy loss they train with.
SEQUENCE_ESTIMATOR_LOSSES = ("gspo", "cispo")


@dataclass
class PolicyLossConfig:
    """Options of the policy loss; field names are slime's flags (``--eps-clip-high`` ->
    ``eps_clip_high``), so ``PolicyLossConfig.from_config(config)`` maps a config by name."""

    loss_type: str = "policy_loss"  # POLICY_LOSSES name (ppo, gspo, cispo, sft_loss, ...) or a plugin's
    eps_clip: float = 0.2  # ρ ≥ 1 - eps_clip
    eps_clip_high: float | None = None  # ρ ≤ 1 + eps_clip_high (None: eps_clip)
    eps_clip_c: float | None = None  # dual-clip bound (> 1), None: off
    entropy_coef: float = 0.0  # loss -= entropy_coef·entropy
    use_kl_loss: bool = False  # add kl_loss_coef·KL(π‖π_ref) to the loss
    kl_loss_coef: float = 0.0
    kl_loss_type: str = "low_var_kl"  # approx_kl kind
    use_unbiased_kl: bool = False  # weight the KL loss by ρ = π/π_old (off-policy samples)
    use_tis: bool = False  # reweight the pg loss by π_old/π_rollout (rollout/train mismatch)
    tis_mode: str = "truncate"  # TIS function: "truncate" clamps w to [tis_clip_low, tis_clip], "icepop" zeroes it outside, or a plugin's
    tis_clip: float = 2.0  # upper bound of the TIS weight / ICEPOP band
    tis_clip_low: float = 0.0  # lower bound (for ICEPOP set it, e.g. 0.5)
    get_mismatch_metrics: bool = False  # report the tis_*/icepop_* metrics without reweighting
    use_rollout_logprobs: bool = False  # ρ = π/π_rollout instead of π/π_old (excludes use_tis)
    use_opsm: bool = False  # off-policy sequence masking (``policy_loss.opsm_keep_mask``)
    opsm_delta: float = 1e-4  # OPSM threshold on a sample's KL(π_old‖π) estimate
    calculate_per_token_loss: bool = False  # "token_mean" reduction
    use_constant_denominator: bool = False  # "constant" reduction (Dr.GRPO)
    run_config: Any = field(default=None, repr=False, compare=False)  # the run's whole config, for plugins' own options

    def __post_init__(self):
        errors = _config_errors(self)
        if errors:
            raise ValueError("invalid policy loss options:\n  " + "\n  ".join(errors))

    @classmethod
    def from_config(cls, config) -> "PolicyLossConfig":
        """Take every field that ``config`` (any object with attributes) has, by name.

        As in slime, ``--advantage-estimator gspo`` (or ``cispo``) with the default
        ``--loss-type policy_loss`` selects that estimator's loss.
        """
        names = [f.name for f in fields(cls) if f.name != "run_config"]
        present = {name: getattr(config, name) for name in names if getattr(config, name, None) is not None}
        estimator = getattr(config, "advantage_estimator", None)
        if present.get("loss_type", "policy_loss") == "policy_loss" and estimator in SEQUENCE_ESTIMATOR_LOSSES:
            present["loss_type"] = estimator
        return cls(**present, run_config=config)

    @property
    def reduction(self) -> str:
        if self.calculate_per_token_loss:
            return "token_mean"
        return "constant" if self.use_constant_denominator else "sample_mean"

    @property
    def needs_rollout_log_probs(self) -> bool:
        """Whether the loss reads the engine's log-probs (``PolicyLossInputs.rollout_log_probs``)."""
        return self.use_tis or self.get_mismatch_metrics or self.use_rollout_logprobs


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
    ``pg_loss_reducer`` when given (else like the other terms). Returns the scalar loss and float metrics, all global-batch
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
    reduce = partial(reduce_loss, loss_mask=inputs.loss_mask, denominators=denominators, mode=config.reduction,
                     sample_tokens=inputs.sample_tokens)
    pg_parts = (loss_fn or _lookup(POLICY_LOSSES, config.loss_type, "policy loss"),
                tis_fn or _lookup(TIS_FUNCTIONS, config.tis_mode, "TIS function"),
                pg_loss_reducer or partial(_reduce_pg_loss, mode=config.reduction))
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


def _reduce_pg_loss(pg_loss, loss_mask, inputs: PolicyLossInputs, denominators: LossDenominators, config, mode: str):
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


def _config_errors(config: PolicyLossConfig) -> list[str]:
    """Every problem with the options, so they are reported together."""
    errors = []
    if config.eps_clip_c is not None and config.eps_clip_c <= 1.0:
        errors.append(f"eps_clip_c must be > 1.0 (got {config.eps_clip_c}); unset it to turn dual clip off")
    if config.kl_loss_type not in KL_KINDS:
        errors.append(f"kl_loss_type {config.kl_loss_type!r} is not one of {', '.join(KL_KINDS)}")
    if config.tis_clip_low > config.tis_clip:
        errors.append(f"tis_clip_low ({config.tis_clip_low}) must not exceed tis_clip ({config.tis_clip})")
    if config.use_rollout_logprobs and config.use_tis:
        errors.append("use_rollout_logprobs and use_tis exclude each other (as in slime): with ρ = π/π_rollout "
                      "there is no rollout/train gap left to reweight; drop one "
                      "(get_mismatch_metrics still reports the gap)")
    if config.calculate_per_token_loss and config.use_constant_denominator:
        errors.append("calculate_per_token_loss and use_constant_denominator exclude each other; pick one")
    return errors


def _to_floats(metrics: dict[str, torch.Tensor]) -> dict[str, float]:
    """One device sync for all metrics."""
    values = torch.stack([value.detach().float().reshape(()) for value in metrics.values()]).tolist()
    return dict(zip(metrics, values))
