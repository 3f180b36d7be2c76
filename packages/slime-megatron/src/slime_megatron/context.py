"""Context parallelism (``--context-parallel-size``): each sequence split over the CP ranks.

Layout, Megatron-LM's load balancing ("zigzag"): a micro-batch's rows (padded to a multiple
of 2·CP columns) are cut into 2·CP equal chunks, and CP rank r holds chunks r and
2·CP − 1 − r. Under the causal mask early chunks are cheap and late ones dear, so every rank
gets one of each. The model runs on the rank's columns only: megatron's rotary embedding
takes the same two chunks of its positions (``get_pos_emb_on_this_cp_rank``, also for
multi-latent attention's YaRN), and the core attention gathers the other ranks' keys and
values (`slime_megatron.models.core_attention`, `all_gather_sequence`).

The loss: targets are read from the whole row before it is split, so the last column of a
chunk predicts the next *global* token. Each rank scores the response tokens that fall in its
columns, and `assemble` adds the ranks' parts into the whole per-token vector on every CP
rank, so the loss (its sequence-level terms such as GSPO's ratio, per-sample denominators) is
computed on whole samples, the same on each CP rank. The backward of `assemble` keeps the
gradient as it is: each rank back-propagates the whole loss into its own columns' outputs
only, the key/value exchange returns the gradients of the gathered keys and values to their
owners, and DDP sums the parameter gradients over the data × context-parallel ranks. DDP
divides them by that group's size, and megatron's schedule multiplies each micro-batch's
loss by the CP size to make up for it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def zigzag_columns(width: int, rank: int, size: int, device=None) -> torch.Tensor:
    """(width / size,) the columns of a ``width``-column row that CP rank ``rank`` of ``size``
    holds, in the order its model input has them: chunk ``rank``, then chunk 2·size − 1 − rank."""
    chunk = width // (2 * size)
    assert chunk * 2 * size == width, f"rows of {width} columns do not split into {2 * size} chunks"
    first, second = rank * chunk, (2 * size - 1 - rank) * chunk
    return torch.cat([torch.arange(first, first + chunk), torch.arange(second, second + chunk)]).to(device)


def local_positions(positions: torch.Tensor, columns: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Of (N,) flat positions into (B·width) whole rows: (N,) bool, whether the rank holds it,
    and the held ones' flat positions into its (B·len(columns)) outputs."""
    lookup = torch.full((width,), -1, dtype=torch.long, device=positions.device)
    lookup[columns.to(positions.device)] = torch.arange(len(columns), device=positions.device)
    column = lookup[positions % width]
    mine = column >= 0
    return mine, (positions[mine] // width) * len(columns) + column[mine]


def assemble(values: torch.Tensor, mine: torch.Tensor, group) -> torch.Tensor:
    """The whole (N, ...) tensor on every CP rank of ``group``, from each rank's ``values``
    (its rows where ``mine``, (N,) bool, is true; every row is one rank's). Differentiable:
    each rank gets the gradient of its own rows (see the module docstring)."""
    whole = values.new_zeros((len(mine), *values.shape[1:]))
    whole = whole.index_put((mine.nonzero().squeeze(1),), values)
    return _SumKeepGradient.apply(whole, group)


class _SumKeepGradient(torch.autograd.Function):
    """Forward: the sum over ``group``; backward: the gradient unchanged (every rank holds the
    same downstream loss, so each passes its gradient to its own part only)."""

    @staticmethod
    def forward(ctx, tensor, group):
        tensor = tensor.clone()
        dist.all_reduce(tensor, group=group)
        return tensor

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def all_gather_sequence(tensor: torch.Tensor, group) -> torch.Tensor:
    """[s, ...] on each rank of ``group`` -> [size·s, ...], the ranks' tensors one after the
    other. Differentiable: the backward sums the gathered tensor's gradients of every rank and
    gives each rank its own part (a reduce-scatter)."""
    return _AllGatherSequence.apply(tensor, group)


class _AllGatherSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, group):
        ctx.group = group
        tensor = tensor.contiguous()
        out = tensor.new_empty((dist.get_world_size(group) * tensor.shape[0], *tensor.shape[1:]))
        dist.all_gather_into_tensor(out, tensor, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        out = grad.new_empty((grad.shape[0] // dist.get_world_size(ctx.group), *grad.shape[1:]))
        dist.reduce_scatter_tensor(out, grad, group=ctx.group)
        return out, None
