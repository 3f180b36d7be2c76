"""slime.backends.megatron_utils.cp_utils: slime's context-parallel helpers for per-sample
log-prob tensors, as the functions slime-compat calls need them.

In slime a context-parallel rank holds its slices of each response, and a TIS or loss function
gathers (`all_gather_with_cp`) or slices (`slice_log_prob_with_cp`) to move between a slice
and the whole response. slime-compat hands such functions each sample's whole response on
every rank (`slime_compat.train_math`), so both are the identity on what they get: gathering
returns the response's tensor, slicing returns the log-probs (checked to be the response's).
"""

from __future__ import annotations

__all__ = ["all_gather_with_cp", "slice_log_prob_with_cp"]


def all_gather_with_cp(tensor, total_length: int, response_length: int):
    """The whole response's values: ``tensor`` itself, which already holds them here."""
    return tensor


def slice_log_prob_with_cp(log_prob, total_length: int, response_length: int):
    """This rank's part of the response's log-probs: all of them here; an error when they are
    not one per response token."""
    if len(log_prob) != response_length:
        raise ValueError(
            f"slice_log_prob_with_cp got {len(log_prob)} log-probs for a response of {response_length} tokens "
            f"(total length {total_length}); pass one log-prob per response token"
        )
    return log_prob
