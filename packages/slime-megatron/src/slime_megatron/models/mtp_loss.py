"""The multi-token prediction (MTP) loss of a micro-batch, from the logits of every depth
(`slime_megatron.models.mtp_model.MTPGPTModel` with ``train_mtp``).

Depth k (1..D) at position t predicts token t + 1 + k. Its loss is the mean over the
micro-batch's trained response tokens y_j (those with loss mask 1) that it can predict
(j − 1 − k ≥ 0) of the cross-entropy −log p_k(y_j), p_k the softmax of depth k's logits at
position j − 1 − k, at temperature 1, over the whole vocabulary (vocabulary-parallel logits,
`slime_megatron.logprobs`):

    L_k = Σ_j m_j · (−log p_k(y_j)) / Σ_j m_j

As in megatron-core (and slime), the training loss adds ``--mtp-loss-scaling-factor`` / D ×
Σ_k L_k, averaged over micro-batches and data-parallel replicas; slime reports Σ_k L_k as
``train/mtp_loss``.
"""

from __future__ import annotations

import torch

from slime_megatron.logprobs import vocab_parallel_log_probs


def mtp_losses(
    depths: list[torch.Tensor],
    input_ids: torch.Tensor,
    lengths: list[int],
    response_lengths: list[int],
    mask: torch.Tensor,
    group,
    vocab_size: int,
) -> torch.Tensor:
    """(D,) L_k for each depth's logits in ``depths`` ((B, W, V/tp) each, depth 1 first).

    ``input_ids`` (B, W) the micro-batch's rows; ``lengths`` / ``response_lengths`` each sample's
    real and response tokens; ``mask`` (b, R) its response tokens' loss mask (R ≥ every response).
    """
    width = input_ids.shape[1]
    losses = []
    for k, logits in enumerate(depths, start=1):
        positions, weights = [], []
        for row, (n, r) in enumerate(zip(lengths, response_lengths)):
            tokens = torch.arange(max(n - r, 1 + k), n)  # the response tokens depth k can predict
            positions.append(row * width + tokens - 1 - k)
            weights.append(mask[row, tokens - (n - r)])
        positions = torch.cat(positions).to(input_ids.device)
        weight = torch.cat(weights).to(device=logits.device, dtype=torch.float32)
        targets = input_ids.reshape(-1)[positions + 1 + k]
        log_probs = vocab_parallel_log_probs(
            logits.reshape(-1, logits.shape[-1])[positions], targets, 1.0, group, vocab_size
        )
        losses.append(-(log_probs * weight).sum() / weight.sum().clamp(min=1.0))
    return torch.stack(losses)
