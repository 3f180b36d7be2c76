"""On-policy distillation (OPD): a teacher's log-probs as a dense per-token reward."""

import torch


def opd_advantages(
    advantages: torch.Tensor,
    log_probs: torch.Tensor,
    teacher_log_probs: torch.Tensor,
    loss_mask: torch.Tensor,
    opd_kl_coef: float,
) -> torch.Tensor:
    """A'_t = A_t - opd_kl_coef·(log π(y_t) - log π_teacher(y_t)) on valid tokens, 0 elsewhere.

    The term is the per-token reverse KL k1 estimate of KL(π‖π_teacher) on the student's own
    samples; it is detached (advantages carry no gradient).
    Shapes: all (B, T) -> (B, T).
    """
    kl = (log_probs - teacher_log_probs).detach()  # (B, T)
    return (advantages - opd_kl_coef * kl) * loss_mask
