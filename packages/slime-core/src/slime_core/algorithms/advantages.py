"""Advantage estimators.

Every estimator has one signature, ``estimator(inputs: AdvantageInputs) -> (advantages,
returns)``, both (B, T) and 0 where ``loss_mask`` is 0, so a backend calls any of them the same
way. ``ADVANTAGE_ESTIMATORS`` maps ``--advantage-estimator`` names to them. An estimator that
reads ``log_probs`` (π_old) whatever the KL settings sets ``needs_old_log_probs = True`` on
itself, so the rank computes π_old before the step (see ``slime_core.rank.step``).

Responses are right-padded rows of a (B, T) batch; ``loss_mask`` may also have holes (tool
output inside a multi-turn response). As in THUDM slime, every response token is a step of
the discounting and of GAE, trained on or not: a masked token earns no reward of its own
but still costs a factor γ (γλ in GAE) between the tokens around it.
"""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .kl import approx_kl


@dataclass
class AdvantageInputs:
    rewards: torch.Tensor  # (B,) scalar reward of each sample
    group_ids: torch.Tensor  # (B,) int; samples of the same prompt share an id (the prompt's group index)
    loss_mask: torch.Tensor  # (B, T) 1 on response tokens trained on, 0 on padding/tool output
    log_probs: torch.Tensor | None = (
        None  # (B, T) log π_old(y_t), for the KL reward penalty (None without one: see slime_core.rank.step)
    )
    ref_log_probs: torch.Tensor | None = None  # (B, T) log π_ref(y_t), for the KL reward penalty
    values: torch.Tensor | None = None  # (B, T) critic values V(s_t), for "ppo"
    response_lengths: torch.Tensor | None = None  # (B,) int, tokens of each response, masked ones included, for "ppo"
    kl_coef: float = 0.0  # weight of the per-token KL penalty in the reward (--kl-coef)
    kl_type: str = "k1"  # approx_kl estimator of that penalty
    gamma: float = 1.0  # discount γ
    lambd: float = 1.0  # GAE λ
    normalize_rewards: bool = (
        True  # group estimators centre the rewards per group; False: --disable-rewards-normalization
    )
    std_normalize: bool = True  # GRPO family: also divide by the group std; False: --disable-grpo-std-normalization
    run_config: Any = field(default=None, repr=False)  # the run's config, for a plugin's own options
    batch: Any = field(
        default=None, repr=False
    )  # the rank's RolloutBatch these rows come from (tokens, engine log-probs)
    entropy: dict[str, list[torch.Tensor]] | None = field(
        default=None, repr=False
    )  # --use-rollout-entropy: per sample, the per-token entropy of "actor" (π_old) and "ref" from their passes


def group_normalize_rewards(
    rewards: torch.Tensor, group_ids: torch.Tensor, std_normalize: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """(r_i - mean_g) / (std_g + eps), or r_i - mean_g without ``std_normalize``.

    mean_g and the unbiased std_g run over the samples whose ``group_ids`` equal sample i's, so
    groups may differ in size. A group of one (or of equal rewards) gets 0, never NaN: THUDM
    slime divides by the NaN std of a single value there, though its command line turns the
    std off for ``--n-samples-per-prompt 1``, which gives 0 as here.
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
    reward (the raw one without ``normalize_rewards``); returns = advantages. No KL in the reward."""
    advantages = _group_rewards(inputs, inputs.std_normalize)[:, None] * inputs.loss_mask  # (B, T)
    return advantages, advantages


def dr_grpo_advantages(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Dr.GRPO: GRPO without the std normalisation, A_it = r_i - mean_g (the same as
    ``grpo`` with ``--disable-grpo-std-normalization``)."""
    return grpo_advantages(dataclasses.replace(inputs, std_normalize=False))


def reinforce_plus_plus_advantages(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: token rewards r_t = -kl_coef·kl_t on valid tokens, plus r_i at the last
    valid token; A_t = G_t = r_t + γ·G_{t+1} over every position (valid or not), kept on valid
    tokens; returns = advantages. Every sample needs a valid token to carry its reward."""
    _check_every_sample_is_trained(inputs, "reinforce_plus_plus")
    mask = inputs.loss_mask
    token_rewards = _at_last_token(inputs.rewards, mask) - _kl_penalty(inputs, mask)
    returns = discounted_cumsum(token_rewards, inputs.gamma) * mask
    return returns, returns


def reinforce_plus_plus_baseline_advantages(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline: A_t = (r_i - mean_g) - kl_coef·kl_t on valid tokens (group-mean
    baseline, never divided by the std, no discounting; r_i itself without
    ``normalize_rewards``); returns = advantages."""
    rewards = _group_rewards(inputs, std_normalize=False)
    advantages = rewards[:, None] * inputs.loss_mask - _kl_penalty(inputs, inputs.loss_mask)
    return advantages, advantages


def ppo_advantages(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO with GAE over every token of the response, valid or not (as THUDM slime):
    r_t = -kl_coef·kl_t, plus r_i at the response's last token whatever its mask;
    δ_t = r_t + γ·V_{t+1} - V_t (V = 0 past the response); A_t = δ_t + γλ·A_{t+1};
    returns = A + V. Both are then kept on valid tokens only."""
    if inputs.values is None:
        raise ValueError("the 'ppo' advantage estimator needs critic values (AdvantageInputs.values)")
    if inputs.response_lengths is None:
        raise ValueError(
            "the 'ppo' advantage estimator needs AdvantageInputs.response_lengths: the reward goes on "
            "each response's last token, which padding and a masked tail would otherwise hide"
        )
    response = _first_positions(inputs.response_lengths, inputs.loss_mask.shape[1])  # (B, T)
    values = inputs.values * response
    token_rewards = _at_last_token(inputs.rewards, response) - _kl_penalty(inputs, response)
    next_values = torch.nn.functional.pad(values[:, 1:], (0, 1))  # (B, T), 0 past the end
    deltas = token_rewards + inputs.gamma * next_values - values
    advantages = discounted_cumsum(deltas, inputs.gamma * inputs.lambd)
    mask = inputs.loss_mask
    return advantages * mask, (advantages + values) * mask


def _group_rewards(inputs: AdvantageInputs, std_normalize: bool) -> torch.Tensor:
    """(B,) the rewards a group estimator trains on: group-normalised
    (`group_normalize_rewards`), or as they are without ``inputs.normalize_rewards``."""
    if not inputs.normalize_rewards:
        return inputs.rewards.float()
    return group_normalize_rewards(inputs.rewards, inputs.group_ids, std_normalize)


def discounted_cumsum(x: torch.Tensor, discount: float) -> torch.Tensor:
    """G_t = x_t + discount·G_{t+1}, right to left along T, G_T = 0. A loop over T,
    vectorised over B. Shapes: (B, T) -> (B, T)."""
    out = torch.zeros_like(x, dtype=torch.promote_types(x.dtype, torch.float32))
    running = torch.zeros_like(out[:, 0])  # (B,)
    for t in reversed(range(x.shape[1])):
        running = x[:, t] + discount * running
        out[:, t] = running
    return out


def _first_positions(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """(B, width) float mask, 1 on each row's first ``lengths[i]`` positions."""
    positions = torch.arange(width, device=lengths.device)
    return (positions[None, :] < lengths[:, None]).float()


def _at_last_token(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) rewards placed at each row's last position where the (B, T) ``mask`` is 1; 0 elsewhere."""
    valid = mask.bool()
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(valid)  # (B, T)
    last = torch.where(valid, positions, -1).amax(-1, keepdim=True)  # (B, 1), -1 if none
    return (positions == last) * rewards.float()[:, None]


def _kl_penalty(inputs: AdvantageInputs, where: torch.Tensor) -> torch.Tensor:
    """(B, T) kl_coef·KL(π_old‖π_ref) per token where ``where`` is 1, 0 when kl_coef is 0."""
    if inputs.kl_coef == 0:
        return torch.zeros_like(inputs.loss_mask, dtype=torch.float32)
    if inputs.log_probs is None or inputs.ref_log_probs is None:
        raise ValueError(
            f"kl_coef={inputs.kl_coef} puts a KL penalty in the reward, which needs log_probs and "
            "ref_log_probs; load a reference model, or set --kl-coef 0"
        )
    kl = approx_kl(inputs.log_probs, inputs.ref_log_probs, inputs.kl_type)
    return inputs.kl_coef * kl * where


def _check_every_sample_is_trained(inputs: AdvantageInputs, estimator: str) -> None:
    """Raise for the first sample whose loss mask is all 0: it has no token to put its reward on."""
    untrained = (inputs.loss_mask.sum(-1) == 0).nonzero().flatten()
    if len(untrained):
        row = int(untrained[0])
        raise ValueError(
            f"{estimator}: sample {row} of the rank's batch (prompt group {int(inputs.group_ids[row])}) has an "
            "all-zero "
            "loss mask, so no token can carry its reward (--sample-filter and --mask-offpolicy-in-partial-rollout mask "
            "whole samples); stop masking whole samples, or choose another --advantage-estimator"
        )


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
