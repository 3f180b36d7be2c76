"""Per-token estimators of KL(π‖π_ref) from samples drawn from π (Schulman's k1/k2/k3)."""

import torch

from slime_core.rank.policy_loss_config import KL_KINDS

# low_var_kl is clamped to [-10, 10]. Clamping r to ±50 first keeps exp(-r) and its gradient
# finite in float32 and changes no value unless an importance ratio below e^-40 multiplies it.
_LOW_VAR_LOG_RATIO_RANGE = 50.0
_LOW_VAR_KL_CLAMP = 10.0


def approx_kl(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    kind: str,
    importance_ratio: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL estimate from r = log_probs - ref_log_probs.

    k1: r;  k2: r²/2;  k3 and low_var_kl: exp(-r) - 1 + r (non-negative, unbiased, lower
    variance); low_var_kl is then clamped to [-10, 10].

    With ``importance_ratio`` (π/π_sample per token), the estimate is multiplied by it before
    the clamp: E_{π_sample}[ρ·k] = E_π[k], which keeps the KL unbiased for off-policy samples.

    Shapes: log_probs, ref_log_probs, importance_ratio: (B, T) (any equal shapes); returns the
    same shape. Masked positions are not special: reduce with the loss mask.
    """
    dtype = torch.promote_types(log_probs.dtype, torch.float32)  # bf16 -> float32, float64 stays
    log_ratio = log_probs.to(dtype) - ref_log_probs.to(dtype)  # (B, T)
    if kind == "k1":
        kl = log_ratio
    elif kind == "k2":
        kl = log_ratio.square() / 2
    elif kind in ("k3", "low_var_kl"):
        if kind == "low_var_kl":
            log_ratio = log_ratio.clamp(-_LOW_VAR_LOG_RATIO_RANGE, _LOW_VAR_LOG_RATIO_RANGE)
        kl = torch.expm1(-log_ratio) + log_ratio
    else:
        raise ValueError(f"unknown KL estimator {kind!r}; valid kinds are {', '.join(KL_KINDS)}")
    if importance_ratio is not None:
        kl = kl * importance_ratio
    if kind == "low_var_kl":
        kl = kl.clamp(-_LOW_VAR_KL_CLAMP, _LOW_VAR_KL_CLAMP)
    return kl
