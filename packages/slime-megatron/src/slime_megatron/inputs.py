"""Model inputs of a micro-batch for Megatron's GPTModel: one right-padded row per sample.

megatron-core's local attention (the only one without Transformer Engine, so the one on
CPU) refuses packed sequences (``PackedSeqParams``, THD), so samples are not packed into one
row: each gets its own row, right-padded to the micro-batch's widest. No attention mask is
needed: the layers' causal mask already keeps every real token from seeing the padding
after it, and the padding's own outputs are never read. ``--use-dynamic-batch-size`` still
plans micro-batches by token budget (`slime_core.rank_step.RankStep.plan`); their rows are
padded the same way.

The width is a multiple of the tensor-parallel size, which sequence parallelism needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class MicroBatch:
    """The rows of one micro-batch and which samples of the rank's share they hold."""

    indices: list[int]  # the samples' indices in the share; [] for a padding micro-batch
    input_ids: torch.Tensor  # (B, W) token ids, right-padded
    position_ids: torch.Tensor  # (B, W) 0..W-1 on every row
    lengths: list[int]  # (B,) real tokens per row
    response_lengths: list[int]  # (B,) response tokens at the end of each row's real tokens
    nuclei: tuple[list[list[int]], list[list[int]]] | None = None  # per row: top-p nucleus ids, offsets

    def response_positions(self) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """Where the response tokens are scored: ((N,) flat positions into (B·W) outputs,
        (N,) the tokens they predict, per-sample counts). The output at position p predicts
        token p + 1, so a response in [n − r, n) is scored at [n − r − 1, n − 1)."""
        width = self.input_ids.shape[1]
        positions = torch.cat([torch.arange(row * width + n - r - 1, row * width + n - 1)
                               for row, (n, r) in enumerate(zip(self.lengths, self.response_lengths))])
        targets = self.input_ids.reshape(-1)[positions + 1]
        return positions.to(self.input_ids.device), targets, list(self.response_lengths)


def padded(indices: list[int], tokens: list[list[int]], response_lengths: list[int], pad_token_id: int,
           multiple: int, device, nuclei=None) -> MicroBatch:
    """Right-padded rows of ``tokens`` (the samples ``indices`` of the share), the width
    rounded up to a multiple of ``multiple``; ``nuclei``: `RolloutBatch.nuclei` of the samples."""
    width = -(-max(len(t) for t in tokens) // multiple) * multiple
    input_ids = torch.full((len(tokens), width), pad_token_id, dtype=torch.long)
    for row, seq in enumerate(tokens):
        input_ids[row, : len(seq)] = torch.tensor(seq)
    position_ids = torch.arange(width).expand(len(tokens), width)
    return MicroBatch(indices, input_ids.to(device), position_ids.to(device), [len(t) for t in tokens],
                      list(response_lengths), nuclei)


def padding_micro_batch(pad_token_id: int, multiple: int, device) -> MicroBatch:
    """Two padding tokens, for a rank with fewer micro-batches than the others: its forward
    and backward keep it in step with their collectives and change nothing."""
    return padded([], [[pad_token_id, pad_token_id]], [1], pad_token_id, multiple, device)
