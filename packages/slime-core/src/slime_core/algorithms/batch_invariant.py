"""Batch-invariant log-probs, for ``--true-on-policy-mode``: one sequence's response log-probs
from a forward pass of that sequence alone, the same numbers whatever else runs beside it.

A batched forward pass gives a token slightly different log-probs depending on its
neighbours (the kernels' blocking and reduction order follow the batch's shape), so an
engine that decodes requests together and a trainer that packs samples differently disagree
at the 1e-7 level. Both sides computing each sequence alone, by these two functions, with the
same weights, dtype and attention kernel, agree bit for bit: the CPU engine for every
finished request (``slime_sglang.cpu_engine.batch_invariant``), the FSDP trainer for every
sample (one sample per micro-batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_core.algorithms.logprobs import log_probs_from_logits

if TYPE_CHECKING:
    import torch


def sequence_inputs(tokens: list[int], device) -> dict[str, torch.Tensor | None]:
    """The model's keyword arguments for ``tokens`` alone: (1, L) ids, (1, L) positions, no mask (causal)."""
    import torch

    return {
        "input_ids": torch.tensor([tokens], device=device),
        "position_ids": torch.arange(len(tokens), device=device)[None],
        "attention_mask": None,
    }


def sequence_log_probs(
    logits: torch.Tensor, input_ids: torch.Tensor, response_length: int, temperature: float
) -> torch.Tensor:
    """log softmax(logits / temperature) of the last ``response_length`` tokens of ``input_ids``
    ((1, L)), from the (1, L, V) ``logits`` of `sequence_inputs`: (response_length,) float32."""
    length = input_ids.shape[1]
    scores = logits[0, length - response_length - 1 : length - 1]
    return log_probs_from_logits(scores, input_ids[0, length - response_length :], temperature)
