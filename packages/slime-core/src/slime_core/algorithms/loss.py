"""The total policy loss of a micro-batch, and the SFT loss.

policy loss = pg_loss - entropy_coef·entropy + kl_loss_coef·kl_loss, each term reduced to its
global-batch contribution (``reduce.reduce_loss``), so summing the loss and the metrics over
micro-batches and data-parallel ranks gives the global-batch values.
"""

import difflib
from dataclasses import dataclass, fields
from functools import partial

import torch

from .kl import KL_KINDS, approx_kl
from .mismatch import icepop_weights, tis_weights
from .policy_loss import POLICY_LOSSES, PolicyLossFn
from .reduce import LossDenominators, reduce_loss

TIS_MODES = ("truncate", "icepop")
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
    tis_mode: str = "truncate"  # "truncate": clamp w to [tis_clip_low, tis_clip]; "icepop": 0 outside
    tis_clip: float = 2.0  # upper bound of the TIS weight / ICEPOP band
    tis_clip_low: float = 0.0  # lower bound (for ICEPOP set it, e.g. 0.5)
    calculate_per_token_loss: bool = False  # "token_mean" reduction
    use_constant_denominator: bool = False  # "constant" reduction (Dr.GRPO)

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
        present = {f.name: getattr(config, f.name) for f in fields(cls) if getattr(config, f.name, None) is not None}
        estimator = getattr(config, "advantage_estimator", None)
        if present.get("loss_type", "policy_loss") == "policy_loss" and estimator in SEQUENCE_ESTIMATOR_LOSSES:
            present["loss_type"] = estimator
        return cls(**present)

    @property
    def reduction(self) -> str:
        if self.calculate_per_token_loss:
            return "token_mean"
        return "constant" if self.use_constant_denominator else "sample_mean"


@dataclass
class PolicyLossInputs:
    log_probs: torch.Tensor  # (B, T) log π(y_t) of the policy being trained, with gradient
    old_log_probs: torch.Tensor  # (B, T) log π_old(y_t), the policy ρ is measured against
    advantages: torch.Tensor  # (B, T)
    loss_mask: torch.Tensor  # (B, T) 1 on tokens trained on
    entropy: torch.Tensor | None = None  # (B, T) with gradient; needed when entropy_coef != 0
    ref_log_probs: torch.Tensor | None = None  # (B, T) log π_ref; needed with use_kl_loss
    rollout_log_probs: torch.Tensor | None = None  # (B, T) the engine's log-probs; needed with use_tis


def compute_policy_loss(
    inputs: PolicyLossInputs,
    config: PolicyLossConfig,
    denominators: LossDenominators,
    loss_fn: PolicyLossFn | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """loss = pg_loss - entropy_coef·entropy + kl_loss_coef·kl_loss for one micro-batch.

    pg_loss is ``loss_fn`` (default ``POLICY_LOSSES[config.loss_type]``), times the TIS/ICEPOP
    weights with ``use_tis``. Returns the scalar loss and float metrics: loss, pg_loss,
    pg_clipfrac, ppo_kl (mean of old - new log-prob), entropy (when given), kl_loss (with
    use_kl_loss) and the tis_*/icepop_* metrics; all are global-batch contributions.
    """
    _check_inputs(inputs, config)
    reduce = partial(reduce_loss, loss_mask=inputs.loss_mask, denominators=denominators, mode=config.reduction)
    loss_fn = loss_fn or _lookup_policy_loss(config.loss_type)
    pg, clipfrac = loss_fn(inputs.log_probs, inputs.old_log_probs, inputs.advantages, inputs.loss_mask, config)
    ppo_kl = (inputs.old_log_probs - inputs.log_probs).detach()  # (B, T)
    metrics = {"pg_clipfrac": reduce(clipfrac), "ppo_kl": reduce(ppo_kl)}
    if config.use_tis:
        weights, tis_metrics = _mismatch_weights(inputs, config, reduce)
        pg = pg * weights
        metrics.update(tis_metrics)
    loss = metrics["pg_loss"] = reduce(pg)
    if inputs.entropy is not None:
        metrics["entropy"] = reduce(inputs.entropy)
        loss = loss - config.entropy_coef * metrics["entropy"]
    if config.use_kl_loss:
        metrics["kl_loss"] = reduce(_kl_loss(inputs, config))
        loss = loss + config.kl_loss_coef * metrics["kl_loss"]
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


def _mismatch_weights(inputs: PolicyLossInputs, config: PolicyLossConfig, reduce):
    args = (inputs.old_log_probs, inputs.rollout_log_probs, inputs.loss_mask)
    if config.tis_mode == "icepop":
        return icepop_weights(*args, low=config.tis_clip_low, high=config.tis_clip, reduce=reduce)
    return tis_weights(*args, clip=config.tis_clip, clip_low=config.tis_clip_low, reduce=reduce)


def _kl_loss(inputs: PolicyLossInputs, config: PolicyLossConfig) -> torch.Tensor:
    ratio = torch.exp(inputs.log_probs - inputs.old_log_probs) if config.use_unbiased_kl else None
    return approx_kl(inputs.log_probs, inputs.ref_log_probs, config.kl_loss_type, importance_ratio=ratio)


def _lookup_policy_loss(name: str) -> PolicyLossFn:
    if name in POLICY_LOSSES:
        return POLICY_LOSSES[name]
    close = difflib.get_close_matches(name, POLICY_LOSSES, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown policy loss {name!r}; built-in losses are {', '.join(POLICY_LOSSES)}.{hint}")


def _check_inputs(inputs: PolicyLossInputs, config: PolicyLossConfig) -> None:
    needs = [
        ("entropy", config.entropy_coef != 0, "entropy_coef != 0"),
        ("ref_log_probs", config.use_kl_loss, "use_kl_loss"),
        ("rollout_log_probs", config.use_tis, "use_tis"),
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
    if config.tis_mode not in TIS_MODES:
        errors.append(f"tis_mode {config.tis_mode!r} is not one of {', '.join(TIS_MODES)}")
    if config.tis_clip_low > config.tis_clip:
        errors.append(f"tis_clip_low ({config.tis_clip_low}) must not exceed tis_clip ({config.tis_clip})")
    if config.calculate_per_token_loss and config.use_constant_denominator:
        errors.append("calculate_per_token_loss and use_constant_denominator exclude each other; pick one")
    return errors


def _to_floats(metrics: dict[str, torch.Tensor]) -> dict[str, float]:
    """One device sync for all metrics."""
    values = torch.stack([value.detach().float().reshape(()) for value in metrics.values()]).tolist()
    return dict(zip(metrics, values))
