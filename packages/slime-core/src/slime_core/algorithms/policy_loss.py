"""Per-token policy-gradient losses: PPO clip (with dual clip), GSPO, CISPO, and SFT; and
OPSM, a per-token mask to multiply into them.

Every loss here is per token, shape (B, T); reduce it with ``reduce.reduce_loss``.
``POLICY_LOSSES`` maps ``--loss-type`` names to the uniform form::

    loss_fn(log_probs, old_log_probs, advantages, loss_mask, config) -> (loss, clipfrac)

with all tensors (B, T), ``config`` any object with ``eps_clip``, ``eps_clip_high`` and
``eps_clip_c`` (a ``PolicyLossConfig``), and both outputs 0 where ``loss_mask`` is 0.
``old_log_probs`` is what ρ is measured against: π_old, or the engine's log-probs with
``--use-rollout-logprobs``.

``policy_loss`` (slime's default name) is the PPO clip loss; ``PolicyLossConfig.from_config``
turns it into ``gspo`` or ``cispo`` when ``--advantage-estimator`` names one of them, as in
slime. ``sft_loss`` ignores advantages: -log π(y_t) on every valid token.
"""

from collections.abc import Callable
from typing import Protocol

import torch

# exp(±20) keeps ρ·A finite (and its gradient free of inf·0) for any float32 advantage; a
# token whose log-ratio is beyond ±20 lies far outside every clip band.
_MAX_LOG_RATIO = 20.0


class ClipConfig(Protocol):
    eps_clip: float  # lower clip: ρ ≥ 1 - eps_clip
    eps_clip_high: float | None  # upper clip: ρ ≤ 1 + eps_clip_high (None: eps_clip)
    eps_clip_c: float | None  # dual-clip bound (> 1) for negative advantages, or None


def clipped_policy_loss(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    eps_clip: float,
    eps_clip_high: float | None = None,
    eps_clip_c: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate from a precomputed log-ratio (per token for PPO, per sequence
    for GSPO).

    ρ = exp(log_ratio);  loss = max(-ρ·A, -clip(ρ, 1-ε, 1+ε_high)·A);
    dual clip: where A < 0, loss = min(loss, -ε_c·A).

    The log-ratio is clamped to ±20 before exp (slime does not clamp: there a log-ratio above
    ~88 overflows ρ to inf in float32 and the loss to inf or NaN). Inside ±20 the two agree
    exactly; beyond it, where any sane clip band has long decided the token, ours stays finite
    with a finite gradient (without dual clip a negative-advantage token there gets ρ = e^20
    and no gradient).

    clipfrac is slime's: 1 where the ε / ε_high clip decided the max, measured before the dual
    clip, so a token that only the ε_c cap decided is not counted.

    Shapes: log_ratio, advantages (B, T) -> loss (B, T), clipfrac (B, T) float.
    """
    _check_dual_clip(eps_clip_c)
    high = eps_clip if eps_clip_high is None else eps_clip_high
    ratio = torch.exp(log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))  # (B, T)
    unclipped = -ratio * advantages
    clipped = -ratio.clamp(1 - eps_clip, 1 + high) * advantages
    loss = torch.maximum(unclipped, clipped)
    clipfrac = (clipped > unclipped).float()  # (B, T)
    if eps_clip_c is not None:
        dual = -eps_clip_c * advantages
        loss = torch.where((advantages < 0) & (dual < loss), dual, loss)
    return loss, clipfrac


def ppo_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    eps_clip: float,
    eps_clip_high: float | None = None,
    eps_clip_c: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clip loss with ρ = exp(log_probs - old_log_probs) per token; see
    ``clipped_policy_loss``. All tensors (B, T); returns (loss, clipfrac), both (B, T)."""
    return clipped_policy_loss(log_probs - old_log_probs, advantages, eps_clip, eps_clip_high, eps_clip_c)


def gspo_sequence_log_ratio(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, loss_mask: torch.Tensor
) -> torch.Tensor:
    """GSPO's sequence log-ratio, broadcast to every token of its sample.

    s_i = Σ_t m_it·(log π(y_it) - log π_old(y_it)) / Σ_t m_it

    d s_i / d log π(y_it) = m_it / |y_i|, so every valid token gets gradient. A sample with no
    valid token gets 0.

    Shapes: log_probs, old_log_probs, loss_mask (B, T) -> (B, T) (a broadcast view).
    """
    mask = loss_mask.to(log_probs.dtype)
    token_log_ratio = (log_probs - old_log_probs) * mask  # (B, T)
    lengths = mask.sum(-1, keepdim=True).clamp(min=1)  # (B, 1)
    return (token_log_ratio.sum(-1, keepdim=True) / lengths).expand_as(log_probs)


def gspo_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    eps_clip: float,
    eps_clip_high: float | None = None,
    eps_clip_c: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GSPO: the PPO clip loss with the sequence log-ratio ``gspo_sequence_log_ratio`` in place
    of the per-token one. All tensors (B, T); returns (loss, clipfrac), both (B, T)."""
    log_ratio = gspo_sequence_log_ratio(log_probs, old_log_probs, loss_mask)
    return clipped_policy_loss(log_ratio, advantages, eps_clip, eps_clip_high, eps_clip_c)


def cispo_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    eps_clip: float,
    eps_clip_high: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """CISPO: clip the importance weight, not the update; every token keeps its gradient.

    loss = -sg[clip(ρ, 1-ε, 1+ε_high)]·A·log π(y_t),  ρ = exp(log_probs - old_log_probs)

    (the value is not a surrogate of the objective; its gradient is -sg[w]·A·∇log π).
    Shapes: all (B, T); returns (loss, clipfrac), clipfrac 1 where ρ was clipped.
    """
    high = eps_clip if eps_clip_high is None else eps_clip_high
    with torch.no_grad():
        ratio = torch.exp(log_probs - old_log_probs)  # (B, T); inf clamps to 1 + high
        weight = ratio.clamp(1 - eps_clip, 1 + high)
    return -weight * advantages * log_probs, (weight != ratio).float()


def opsm_keep_mask(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    delta: float,
) -> torch.Tensor:
    """Off-policy sequence masking (OPSM, DeepSeek-V3.2; slime's ``--use-opsm``): stop learning
    from the negative-advantage tokens of a sample the policy has drifted too far from, where
    the ratio of a bad action is least trustworthy.

    d_i = Σ_t m_it·(log π_old(y_it) - log π(y_it)) / max(Σ_t m_it, 1)   (sample i's KL estimate)
    keep_it = 0 where A_it < 0 and d_i > delta, else 1

    Multiply it into the per-token policy loss. Shapes: all (B, T) -> keep (B, T) float, with
    no gradient.
    """
    mask = loss_mask.bool()
    zero = torch.zeros((), dtype=log_probs.dtype, device=log_probs.device)
    gap = torch.where(mask, old_log_probs - log_probs.detach(), zero)  # (B, T)
    drift = gap.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)  # (B, 1)
    return 1.0 - ((advantages < 0) & (drift > delta)).to(log_probs.dtype)


def _check_dual_clip(eps_clip_c: float | None) -> None:
    if eps_clip_c is not None and eps_clip_c <= 1.0:
        raise ValueError(
            f"eps_clip_c (dual-clip bound) must be > 1.0, got {eps_clip_c}: it caps -ρ·A at "
            "-ε_c·A for A < 0. Set --eps-clip-c to e.g. 3.0, or leave it unset to turn dual clip off."
        )


def ppo_loss_fn(log_probs, old_log_probs, advantages, loss_mask, config: ClipConfig):
    """``ppo_policy_loss`` in the uniform ``POLICY_LOSSES`` form, masked."""
    loss, clipfrac = ppo_policy_loss(
        log_probs, old_log_probs, advantages, config.eps_clip, config.eps_clip_high, config.eps_clip_c
    )
    return loss * loss_mask, clipfrac * loss_mask


def gspo_loss_fn(log_probs, old_log_probs, advantages, loss_mask, config: ClipConfig):
    """``gspo_policy_loss`` in the uniform ``POLICY_LOSSES`` form, masked."""
    loss, clipfrac = gspo_policy_loss(
        log_probs, old_log_probs, advantages, loss_mask, config.eps_clip, config.eps_clip_high, config.eps_clip_c
    )
    return loss * loss_mask, clipfrac * loss_mask


def cispo_loss_fn(log_probs, old_log_probs, advantages, loss_mask, config: ClipConfig):
    """``cispo_policy_loss`` in the uniform ``POLICY_LOSSES`` form, masked."""
    loss, clipfrac = cispo_policy_loss(log_probs, old_log_probs, advantages, config.eps_clip, config.eps_clip_high)
    return loss * loss_mask, clipfrac * loss_mask


def sft_loss_fn(log_probs, old_log_probs, advantages, loss_mask, config: ClipConfig):
    """Supervised loss -log π(y_t) on valid tokens (advantages unused); clipfrac 0."""
    return -log_probs * loss_mask, torch.zeros_like(log_probs)


PolicyLossFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]

POLICY_LOSSES: dict[str, PolicyLossFn] = {
    "policy_loss": ppo_loss_fn,
    "ppo": ppo_loss_fn,
    "gspo": gspo_loss_fn,
    "cispo": cispo_loss_fn,
    "sft_loss": sft_loss_fn,
}
