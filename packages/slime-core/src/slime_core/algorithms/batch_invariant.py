"""Batch-invariant log-probs, for ``--true-on-policy-mode``: one sequence's response log-probs
from a forward pass of that sequence alone, the same numbers whatever else runs beside it.

A batched forward pass gives a token slightly different log-probs depending on its
neighbours (the kernels' blocking and reduction order follow the batch's shape), so an
engine that decodes requests together and a trainer that packs samples differently disagree
at the 1e-7 level. On CPU the number of threads changes the numbers too (torch splits the work
of short sequences differently), so both sides compute them on `THREADS` threads. Both sides
computing each sequence alone, by these functions, with the same weights, dtype, attention
kernel and threads, agree bit for bit: the CPU engine for every
finished request (``slime_sglang.cpu_engine.batch_invariant``), the FSDP trainer for every
sample (one sample per micro-batch).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from slime_core.algorithms.logprobs import log_probs_from_logits

if TYPE_CHECKING:
    import torch


THREADS = 1  # torch's CPU threads for batch-invariant numbers, on the engine and on the train ranks


@contextmanager
def fixed_threads() -> Iterator[None]:
    """Run the block on `THREADS` CPU threads, then go back to the process's count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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
