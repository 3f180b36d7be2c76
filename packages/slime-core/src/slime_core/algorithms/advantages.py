"""Advantage estimators.

Every estimator has one signature, ``estimator(inputs: AdvantageInputs) -> (advantages,
returns)``, both (B, T) and 0 where ``loss_mask`` is 0, so a backend calls any of them the same
way. ``ADVANTAGE_ESTIMATORS`` maps ``--advantage-estimator`` names to them.

Responses are right-padded rows of a (B, T) batch; ``loss_mask`` may also have holes (tool
output inside a multi-turn response). Discounting and GAE step over valid tokens only: a
masked token is not an action, it just passes the running return through.
"""

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch

from .kl import approx_kl


@dataclass
class AdvantageInputs:
    rewards: torch.Tensor  # (B,) scalar reward of each sample
    group_ids: torch.Tensor  # (B,) int; samples of the same prompt share an id
    loss_mask: torch.Tensor  # (B, T) 1 on response tokens trained on, 0 on padding/tool output
    log_probs: torch.Tensor | None = None  # (B, T) log π_old(y_t), for the KL reward penalty (None without one: see slime_core.rank_step)
    ref_log_probs: torch.Tensor | None = None  # (B, T) log π_ref(y_t), for the KL reward penalty
    values: torch.Tensor | None = None  # (B, T) critic values V(s_t), for "ppo"
    kl_coef: float = 0.0  # weight of the per-token KL penalty in the reward (--kl-coef)
    kl_type: str = "k1"  # approx_kl estimator of that penalty
    gamma: float = 1.0  # discount γ
    lambd: float = 1.0  # GAE λ
    std_normalize: bool = True  # divide by the group std (GRPO); False is Dr.GRPO


def group_normalize_rewards(
    rewards: torch.Tensor, group_ids: torch.Tensor, std_normalize: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """(r_i - mean_g) / (std_g + eps), or r_i - mean_g without ``std_normalize``.

    mean_g and the unbiased std_g run over the samples whose ``group_ids`` equal sample i's, so
    groups may differ in size; a group of one (or of equal rewards) gets 0, never NaN.
    Shapes: rewards (B,), group_ids (B,) -> (B,) float.
    """
    rewards = rewards.float()
    _, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    means = torch.zeros(len(counts), device=rewards.device).index_add_(0, inverse, rewards) / counts
    centered = rewards - means[inverse]  # (B,)
    if not std_normalize:
        return centered
    square_sums = torch.zeros(len(counts), device=rewards.device).index_add_(0, inverse, centered.square())
    stds = (square_sums / (counts - 1).clamp(min=1)).sqrt()  # (G,)
    return centered / (stds[inverse] + eps)


def grpo_advantages(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (also GSPO, CISPO): A_it = R̂_i on every valid token, R̂ the group-normalised
    reward (``group_normalize_rewards``); returns = advantages. No KL in the reward."""
    normalized = group_normalize_rewards(inputs.rewards, inputs.group_ids, inputs.std_normalize)
    advantages = normalized[:, None] * inputs.loss_mask  # (B, T)
    return advantages, advantages


def dr_grpo_advantages(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Dr.GRPO: GRPO without the std normalisation, A_it = r_i - mean_g."""
    return grpo_advantages(dataclasses.replace(inputs, std_normalize=False))


def reinforce_plus_plus_advantages(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: token rewards r_t = -kl_coef·kl_t, plus r_i at the last valid token;
    A_t = G_t = Σ_{k ≥ t, valid} γ^(steps from t to k)·r_k; returns = advantages."""
    token_rewards = _at_last_valid_token(inputs.rewards, inputs.loss_mask) - _kl_penalty(inputs)
    returns = discounted_cumsum(token_rewards, inputs.loss_mask, inputs.gamma)
    return returns, returns


def reinforce_plus_plus_baseline_advantages(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline: A_t = (r_i - mean_g) - kl_coef·kl_t on valid tokens (group-mean
    baseline, no discounting); returns = advantages."""
    centered = group_normalize_rewards(inputs.rewards, inputs.group_ids, std_normalize=False)
    advantages = centered[:, None] * inputs.loss_mask - _kl_penalty(inputs)
    return advantages, advantages


def ppo_advantages(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO with GAE. r_t = -kl_coef·kl_t (+ r_i at the last valid token);
    δ_t = r_t + γ·V_next(t) - V_t, V_next the value at the next valid token (0 after the last);
    A_t = δ_t + γλ·A_next(t); returns = A + V on valid tokens."""
    if inputs.values is None:
        raise ValueError("the 'ppo' advantage estimator needs critic values (AdvantageInputs.values)")
    mask = inputs.loss_mask
    values = inputs.values * mask  # (B, T)
    token_rewards = _at_last_valid_token(inputs.rewards, mask) - _kl_penalty(inputs)
    deltas = token_rewards + inputs.gamma * _next_valid_values(values, mask) - values
    advantages = discounted_cumsum(deltas, mask, inputs.gamma * inputs.lambd)
    return advantages, (advantages + values) * mask


def discounted_cumsum(x: torch.Tensor, mask: torch.Tensor, discount: float) -> torch.Tensor:
    """G_t = x_t + discount·G_next(t) over valid tokens, right to left; 0 on masked tokens
    (which pass G through). A loop over T, vectorised over B. Shapes: (B, T) -> (B, T)."""
    valid = mask.bool()
    out = torch.zeros_like(x, dtype=torch.promote_types(x.dtype, torch.float32))
    running = torch.zeros_like(out[:, 0])  # (B,)
    for t in reversed(range(x.shape[1])):
        running = torch.where(valid[:, t], x[:, t] + discount * running, running)
        out[:, t] = running
    return out * valid


def _at_last_valid_token(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) rewards placed at each row's last valid token of a (B, T) mask; 0 elsewhere."""
    valid = mask.bool()
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(valid)  # (B, T)
    last = torch.where(valid, positions, -1).amax(-1, keepdim=True)  # (B, 1), -1 if none
    return (positions == last) * rewards.float()[:, None]


def _next_valid_values(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T): the value at the first valid position after t, 0 when there is none."""
    batch, length = mask.shape
    positions = torch.arange(length, device=mask.device).expand(batch, length)
    valid_positions = torch.where(mask.bool(), positions, length)  # length = "none"
    first_at_or_after = valid_positions.flip(-1).cummin(-1).values.flip(-1)  # (B, T)
    none = torch.full((batch, 1), length, device=mask.device)
    first_after = torch.cat([first_at_or_after[:, 1:], none], dim=1)
    padded = torch.cat([values, values.new_zeros(batch, 1)], dim=1)  # (B, T + 1)
    return padded.gather(1, first_after)


def _kl_penalty(inputs: AdvantageInputs) -> torch.Tensor:
    """(B, T) kl_coef·KL(π_old‖π_ref) per valid token, 0 when kl_coef is 0."""
    if inputs.kl_coef == 0:
        return torch.zeros_like(inputs.loss_mask, dtype=torch.float32)
    if inputs.log_probs is None or inputs.ref_log_probs is None:
        raise ValueError(
            f"kl_coef={inputs.kl_coef} puts a KL penalty in the reward, which needs log_probs and "
            "ref_log_probs; load a reference model, or set --kl-coef 0"
        )
    kl = approx_kl(inputs.log_probs, inputs.ref_log_probs, inputs.kl_type)
    return inputs.kl_coef * kl * inputs.loss_mask


AdvantageEstimator = Callable[[AdvantageInputs], tuple[torch.Tensor, torch.Tensor]]

ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "grpo": grpo_advantages,
    "gspo": grpo_advantages,
    "cispo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "reinforce_plus_plus": reinforce_plus_plus_advantages,
    "reinforce_plus_plus_baseline": reinforce_plus_plus_baseline_advantages,
    "ppo": ppo_advantages,
}
