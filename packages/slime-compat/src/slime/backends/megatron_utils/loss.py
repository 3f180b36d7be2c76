"""slime.backends.megatron_utils.loss: `get_log_probs_and_entropy`, the function with which
slime's own policy loss takes the per-token log-probs and entropy of the responses from the
logits, and with which a slime custom loss (``--custom-loss-function-path``) does the same.

A custom loss here gets the whole vocabulary's logits of the packed micro-batch on every rank
(`slime_compat.custom_loss`), so they are scored as they are, by slime-core's chunked
functions (`slime_core.algorithms.logprobs`), with no tensor- or context-parallel exchange; the
entropy is the one the backends log for ``--use-rollout-entropy``.
"""

from __future__ import annotations

__all__ = ["get_log_probs_and_entropy"]


def get_log_probs_and_entropy(
    logits,
    *,
    args,
    unconcat_tokens,
    total_lengths,
    response_lengths,
    with_entropy: bool = False,
    non_loss_data: bool = True,
    top_p_token_ids=None,
    top_p_token_offsets=None,
):
    """``(empty tensor, {"log_probs": [...], "entropy": [...]})`` as slime answers it: per sample,
    the (response length,) float32 log-probs of its response tokens and, ``with_entropy``, the
    entropy of π at each of them, from ``logits`` [1, Σ total_lengths, V] float32 divided by
    ``args.rollout_temperature`` (a response token is scored at the position before it).
    Differentiable with respect to the logits. Top-p replay's nuclei are refused: the custom
    loss's batch here carries none."""
    import torch

    from slime_core.algorithms.logprobs import entropy_from_logits, log_probs_from_logits

    if top_p_token_ids is not None or top_p_token_offsets is not None:
        raise ValueError(
            "get_log_probs_and_entropy: top-p replay's nuclei (top_p_token_ids / top_p_token_offsets) are not "
            "taken here; call it without them (the custom loss's batch has none)"
        )
    if logits.dim() != 3 or logits.size(0) != 1 or logits.dtype != torch.float32:
        raise ValueError(
            f"get_log_probs_and_entropy takes logits [1, T, V] float32, as slime's does; got "
            f"{list(logits.shape)} {logits.dtype}: pass the custom loss's logits as it got them"
        )
    scores = logits[0]  # (T, V)
    temperature = getattr(args, "rollout_temperature", 1.0)
    following = torch.cat([torch.as_tensor(t, device=scores.device) for t in unconcat_tokens]).roll(-1)  # (T,)
    log_probs = _responses(log_probs_from_logits(scores, following, temperature), total_lengths, response_lengths)
    answer = {"log_probs": log_probs}
    if with_entropy:
        answer["entropy"] = _responses(entropy_from_logits(scores, temperature), total_lengths, response_lengths)
    return torch.empty((0,), device=scores.device), answer


def _responses(per_position, total_lengths, response_lengths) -> list:
    """Each sample's values at the positions that predict its response tokens, from the (T,)
    values of every packed position."""
    out, end = [], 0
    for total, response in zip(total_lengths, response_lengths, strict=True):
        end += total
        out.append(per_position[end - response - 1 : end - 1])
    return out
