"""`PolicyLossConfig`: the policy loss's options, read from a run's config and checked.

Apart from the loss itself (`slime_core.algorithms.loss`) and without torch, so that the checks
``slime run`` makes before it starts anything import no torch (~1.4 CPU-s): a config with a
mistake is answered at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slime_core.config import Config

#: The estimators of KL(π‖π_ref) (`slime_core.algorithms.kl.approx_kl`).
KL_KINDS = ("k1", "k2", "k3", "low_var_kl")
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
    # TIS function: "truncate" clamps w to [tis_clip_low, tis_clip], "icepop" zeroes it outside, or a plugin's
    tis_mode: str = "truncate"
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
    def from_config(cls, config: Config) -> PolicyLossConfig:
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
        errors.append(
            "use_rollout_logprobs and use_tis exclude each other (as in slime): with ρ = π/π_rollout "
            "there is no rollout/train gap left to reweight; drop one "
            "(get_mismatch_metrics still reports the gap)"
        )
    if config.calculate_per_token_loss and config.use_constant_denominator:
        errors.append("calculate_per_token_loss and use_constant_denominator exclude each other; pick one")
    return errors
