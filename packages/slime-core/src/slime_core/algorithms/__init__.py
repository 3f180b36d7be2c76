"""The RL math of slime: plain, vectorised torch on (B, T) tensors with a loss mask, shared by
the training backends. Importing this package imports torch; ``import slime_core`` does not
import it.

Modules, one concept each: ``kl`` (KL estimators), ``advantages`` (advantage estimators and
``ADVANTAGE_ESTIMATORS``), ``distillation`` (on-policy distillation), ``normalization`` (whitening),
``policy_loss`` (per-token PPO/GSPO/CISPO and ``POLICY_LOSSES``), ``value`` (critic loss),
``mismatch`` (TIS/ICEPOP and ``TIS_FUNCTIONS``), ``logprobs`` (chunked log-probs and entropy, top-p keep masks),
``reduce``
(global-batch loss reduction), ``loss`` (total policy loss and SFT loss).
"""

from .advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimator,
    AdvantageInputs,
    discounted_cumsum,
    dr_grpo_advantages,
    group_normalize_rewards,
    grpo_advantages,
    ppo_advantages,
    reinforce_plus_plus_advantages,
    reinforce_plus_plus_baseline_advantages,
)
from .distillation import opd_advantages
from .kl import KL_KINDS, approx_kl
from .logprobs import entropy_from_logits, log_probs_from_logits, nucleus_keep_mask
from .loss import PgLossReducer, PolicyLossConfig, PolicyLossInputs, compute_policy_loss, sft_loss
from .mismatch import TIS_FUNCTIONS, TisFn, icepop_tis, icepop_weights, tis_weights, truncate_tis
from .normalization import whiten
from .policy_loss import (
    POLICY_LOSSES,
    ClipConfig,
    PolicyLossFn,
    cispo_policy_loss,
    clipped_policy_loss,
    gspo_policy_loss,
    gspo_sequence_log_ratio,
    ppo_policy_loss,
)
from .reduce import REDUCTIONS, LossDenominators, loss_denominators, masked_mean, reduce_loss
from .value import value_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AdvantageEstimator",
    "AdvantageInputs",
    "ClipConfig",
    "KL_KINDS",
    "LossDenominators",
    "POLICY_LOSSES",
    "PgLossReducer",
    "PolicyLossConfig",
    "PolicyLossFn",
    "PolicyLossInputs",
    "REDUCTIONS",
    "TIS_FUNCTIONS",
    "TisFn",
    "approx_kl",
    "cispo_policy_loss",
    "clipped_policy_loss",
    "compute_policy_loss",
    "discounted_cumsum",
    "dr_grpo_advantages",
    "entropy_from_logits",
    "group_normalize_rewards",
    "grpo_advantages",
    "gspo_policy_loss",
    "gspo_sequence_log_ratio",
    "icepop_tis",
    "icepop_weights",
    "log_probs_from_logits",
    "loss_denominators",
    "masked_mean",
    "nucleus_keep_mask",
    "opd_advantages",
    "ppo_advantages",
    "ppo_policy_loss",
    "reduce_loss",
    "reinforce_plus_plus_advantages",
    "reinforce_plus_plus_baseline_advantages",
    "sft_loss",
    "tis_weights",
    "truncate_tis",
    "value_loss",
    "whiten",
]
