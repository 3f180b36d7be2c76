"""Model inputs of a micro-batch for Megatron's GPTModel: one right-padded row per sample.

megatron-core's local attention (the only one without Transformer Engine, so the one on
CPU) refuses packed sequences (``PackedSeqParams``, THD), so samples are not packed into one
row: each gets its own row, right-padded to the micro-batch's widest. No attention mask is
needed: the layers' causal mask already keeps every real token from seeing the padding
after it, and the padding's own outputs are never read. ``--use-dynamic-batch-size`` still
plans micro-batches by token budget (`slime_core.rank.step.RankStep.plan`); their rows are
padded the same way.

The width is a multiple of the tensor-parallel size, which sequence parallelism needs, and
with context parallelism of 2·CP·TP: :func:`split_over_context` gives the model the rank's
two chunks of every row (`slime_megatron.context`), while the micro-batch keeps the whole
rows for the targets.

With expert parallelism on megatron's all-gather token dispatcher (the one that runs on CPU)
every rank of an expert-parallel group all-gathers the others' tokens into one tensor, so
their micro-batches must have the same shape: :func:`same_shapes` pads each micro-batch with
columns and empty rows to the largest shape any rank has at its position.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from slime_megatron.context import local_positions, zigzag_columns


@dataclass
class MicroBatch:
    """The rows of one micro-batch and which samples of the rank's share they hold."""

    indices: list[int]  # the samples' indices in the share; [] for a padding micro-batch
    input_ids: torch.Tensor  # (B, W) token ids, right-padded; B ≥ len(lengths): padding rows last
    position_ids: torch.Tensor  # (B, W) 0..W-1 on every row
    lengths: list[int]  # real tokens of each sample's row (the first len(lengths) rows)
    response_lengths: list[int]  # response tokens at the end of each sample's real tokens
    nuclei: tuple[list[list[int]], list[list[int]]] | None = None  # per row: top-p nucleus ids, offsets
    columns: torch.Tensor | None = None  # (W/cp,) with context parallelism: the columns the rank's model runs on

    def model_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids, position_ids) the model runs on: the whole rows, or this context-parallel
        rank's columns of them."""
        if self.columns is None:
            return self.input_ids, self.position_ids
        return self.input_ids[:, self.columns], self.position_ids[:, self.columns]

    def held(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Of (N,) flat positions into the whole (B·W) rows: (N,) bool, which ones the rank's
        outputs hold, and where they are in its (B·W) or (B·W/cp) outputs."""
        if self.columns is None:
            return torch.ones_like(positions, dtype=torch.bool), positions
        return local_positions(positions, self.columns, self.input_ids.shape[1])

    def response_positions(self) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """Where the response tokens are scored: ((N,) flat positions into (B·W) outputs,
        (N,) the tokens they predict, per-sample counts). The output at position p predicts
        token p + 1, so a response in [n − r, n) is scored at [n − r − 1, n − 1)."""
        width = self.input_ids.shape[1]
        positions = torch.cat(
            [
                torch.arange(row * width + n - r - 1, row * width + n - 1)
                for row, (n, r) in enumerate(zip(self.lengths, self.response_lengths))
            ]
        )
        targets = self.input_ids.reshape(-1)[positions + 1]
        return positions.to(self.input_ids.device), targets, list(self.response_lengths)


def padded(
    indices: list[int],
    tokens: list[list[int]],
    response_lengths: list[int],
    pad_token_id: int,
    multiple: int,
    device,
    nuclei=None,
) -> MicroBatch:
    """Right-padded rows of ``tokens`` (the samples ``indices`` of the share), the width
    rounded up to a multiple of ``multiple``; ``nuclei``: `RolloutBatch.nuclei` of the samples."""
    width = -(-max(len(t) for t in tokens) // multiple) * multiple
    input_ids = torch.full((len(tokens), width), pad_token_id, dtype=torch.long)
    for row, seq in enumerate(tokens):
        input_ids[row, : len(seq)] = torch.tensor(seq)
    position_ids = torch.arange(width).expand(len(tokens), width)
    return MicroBatch(
        indices, input_ids.to(device), position_ids.to(device), [len(t) for t in tokens], list(response_lengths), nuclei
    )


def tokens_gathered_across_replicas(model_config) -> bool:
    """Whether the MoE layers of a model with megatron config ``model_config`` all-gather
    tokens from ranks that hold other samples (then see :func:`same_shapes`): the all-gather
    dispatcher over an expert-parallel group, or over an expert-tensor-parallel group that is
    not the tensor-parallel one."""
    c = model_config
    return (
        bool(c.num_moe_experts)
        and c.moe_token_dispatcher_type == "allgather"
        and (c.expert_model_parallel_size > 1 or c.expert_tensor_parallel_size != c.tensor_model_parallel_size)
    )


def same_shapes(micros: list[MicroBatch], group, pad_token_id: int, all_alike: bool = False) -> list[MicroBatch]:
    """``micros`` padded so that the micro-batch at each position has the same (B, W) on every
    rank of ``group`` (all have as many micro-batches: `slime_core.rank.step.RankStep.plan`);
    with ``all_alike``, every micro-batch the same (B, W): megatron-core 0.16's interleaved
    schedule (virtual pipeline stages) mixes up micro-batches of different shapes (a backward
    gets a gradient of another micro-batch's shape)."""
    shapes = torch.tensor([list(m.input_ids.shape) for m in micros])  # (M, 2) rows, width
    dist.all_reduce(shapes, op=dist.ReduceOp.MAX, group=group)
    if all_alike:
        shapes[:] = shapes.max(dim=0).values
    return [_widened(m, rows, width, pad_token_id) for m, (rows, width) in zip(micros, shapes.tolist())]


def _widened(micro: MicroBatch, rows: int, width: int, pad_token_id: int) -> MicroBatch:
    """``micro`` right-padded to ``width`` columns, with padding rows up to ``rows``."""
    missing_rows, missing_columns = rows - micro.input_ids.shape[0], width - micro.input_ids.shape[1]
    input_ids = torch.nn.functional.pad(micro.input_ids, (0, missing_columns, 0, missing_rows), value=pad_token_id)
    position_ids = torch.arange(width, device=input_ids.device).expand(rows, width)
    return replace(micro, input_ids=input_ids, position_ids=position_ids)


def padding_micro_batch(pad_token_id: int, multiple: int, device) -> MicroBatch:
    """Two padding tokens, for a rank with fewer micro-batches than the others: its forward
    and backward keep it in step with their collectives and change nothing."""
    return padded([], [[pad_token_id, pad_token_id]], [1], pad_token_id, multiple, device)


def split_over_context(micro: MicroBatch, rank: int, size: int) -> MicroBatch:
    """``micro`` run by context-parallel rank ``rank`` of ``size``: its model input is the
    rank's two chunks of every row (`slime_megatron.context.zigzag_columns`)."""
    if size == 1:
        return micro
    return replace(micro, columns=zigzag_columns(micro.input_ids.shape[1], rank, size, micro.input_ids.device))
