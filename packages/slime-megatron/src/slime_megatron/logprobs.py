"""Log-probs and entropy from vocabulary-parallel logits, without gathering the vocabulary.

With tensor parallelism Megatron's output layer leaves each rank the logits of one
contiguous slice of the (padded) vocabulary: (N, V/tp) rows. Gathering them would put an
(N, V) tensor on every rank; instead each rank reduces its slice and the softmax statistics
are all-reduced over the tensor-parallel group. With z = logits / temperature:

    m = max_v z_v                  (all-reduce MAX)
    s = Σ_v exp(z_v − m)           (all-reduce SUM),  lse = m + log s
    log p(y) = z_y − lse           z_y from the rank that holds y (all-reduce SUM)
    H = lse − Σ_v p_v·z_v          (all-reduce SUM)

The backward needs no communication: d log p(y)/dz_v = 1[v = y] − p_v and
dH/dz_v = −p_v·(z_v − lse + H) for the rank's own slice (times 1/temperature), and the output
layer's backward all-reduces the hidden-state gradient. Vocabulary entries past the real
vocabulary (Megatron pads it to a multiple of 128·tp) are excluded, so the distribution is
the Hugging Face model's. Work is float32, as in ``slime_core.algorithms.logprobs``.

A loss that reads the whole logits (``needs_logits``, see ``slime_core.rank.step``) gets them
gathered over the tensor-parallel group (`gather_vocab`): (N, V) on every rank, built only
for such a loss.

Top-p replay: the log-probs take a keep mask of the rank's slice
(``slime_core.algorithms.nucleus_keep_mask`` with the slice's first id); dropped entries are
-inf like the padding, so the softmax statistics renormalise over the nucleus. Entropy stays
over the whole vocabulary, as slime computes it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable


def vocab_parallel_log_probs(
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    group,
    vocab_size: int,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """log softmax(logits / temperature)[target] over the whole vocabulary, or over the kept
    tokens.

    Shapes: logits (N, V_local) this rank's slice (rank r holds ids [r·V_local, (r+1)·V_local)
    of the tensor-parallel ``group``), targets (N,) int64, keep (N, V_local) bool or None ->
    (N,) float32. ``vocab_size``: the real vocabulary size (ids at or past it are padding).
    Differentiable in the logits.
    """
    return _LogProbs.apply(logits, targets, temperature, group, vocab_size, keep)


def vocab_parallel_entropy(logits: torch.Tensor, temperature: float, group, vocab_size: int) -> torch.Tensor:
    """Entropy of softmax(logits / temperature) over the whole vocabulary; (N, V_local) ->
    (N,) float32, differentiable (see the module docstring)."""
    return _Entropy.apply(logits, temperature, group, vocab_size)


def _scaled(
    logits: torch.Tensor, temperature: float, group, vocab_size: int, keep: torch.Tensor | None = None
) -> tuple[torch.Tensor, int]:
    """A fresh float32 (N, V_local) copy of logits / temperature with padding ids (and ids
    not kept) at -inf, and the first vocabulary id of this rank's slice."""
    width = logits.shape[-1]
    start = dist.get_rank(group) * width
    z = logits.float().div(temperature)
    if start + width > vocab_size:
        z[:, max(0, vocab_size - start) :] = float("-inf")
    if keep is not None:
        z.masked_fill_(~keep, float("-inf"))
    return z, start


def _log_sum_exp(z: torch.Tensor, group) -> torch.Tensor:
    """(N,) log Σ_v exp z_v over every rank's slice."""
    top = z.max(dim=-1).values
    dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
    total = (z - top[:, None]).exp().sum(-1)
    dist.all_reduce(total, group=group)
    return top + total.log()


class _LogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, temperature, group, vocab_size, keep):
        z, start = _scaled(logits, temperature, group, vocab_size, keep)
        lse = _log_sum_exp(z, group)  # (N,)
        local = targets - start
        mine = (local >= 0) & (local < z.shape[-1])  # (N,) the target is in this rank's slice
        local = local.clamp(0, z.shape[-1] - 1)
        picked = torch.where(mine, z.gather(1, local[:, None]).squeeze(1), 0.0)
        dist.all_reduce(picked, group=group)
        ctx.save_for_backward(logits, local, mine, lse, keep)
        ctx.temperature, ctx.group, ctx.vocab_size = temperature, group, vocab_size
        return picked - lse

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        logits, local, mine, lse, keep = ctx.saved_tensors
        p = _scaled(logits, ctx.temperature, ctx.group, ctx.vocab_size, keep)[0].sub_(lse[:, None]).exp_()
        grad = p.mul_(-grad_out[:, None])  # −g·p_v
        grad.scatter_add_(1, local[:, None], (grad_out * mine)[:, None])  # + g·1[v = y]
        return grad.div_(ctx.temperature).to(logits.dtype), None, None, None, None, None


class _Entropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, temperature, group, vocab_size):
        z, _ = _scaled(logits, temperature, group, vocab_size)
        lse = _log_sum_exp(z, group)
        p = (z - lse[:, None]).exp()
        expected = (p * z.nan_to_num(neginf=0.0)).sum(-1)  # Σ p·z over the slice (p = 0 on padding)
        dist.all_reduce(expected, group=group)
        entropy = lse - expected
        ctx.save_for_backward(logits, lse, entropy)
        ctx.temperature, ctx.group, ctx.vocab_size = temperature, group, vocab_size
        return entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        logits, lse, entropy = ctx.saved_tensors
        z = _scaled(logits, ctx.temperature, ctx.group, ctx.vocab_size)[0]
        log_p = z.sub_(lse[:, None])
        p = log_p.exp()
        grad = p.mul_(log_p.nan_to_num_(neginf=0.0).add_(entropy[:, None])).mul_(-grad_out[:, None])
        return grad.div_(ctx.temperature).to(logits.dtype), None, None, None


def gather_vocab(logits: torch.Tensor, group, vocab_size: int) -> torch.Tensor:
    """The whole vocabulary's logits from every rank's slice, for a loss that reads them all
    (a ``needs_logits`` loss): (N, V_local) -> (N, vocab_size), the padding ids dropped.
    Differentiable: each rank's gradient is its own slice of the full one."""
    return _GatherVocab.apply(logits, group)[:, :vocab_size]


class _GatherVocab(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, group):
        ctx.group = group
        if dist.get_world_size(group) == 1:
            return logits.clone()
        parts = [torch.empty_like(logits) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, logits.contiguous(), group=group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        width = grad_out.shape[-1] // dist.get_world_size(ctx.group)
        start = dist.get_rank(ctx.group) * width
        return grad_out[:, start : start + width].contiguous(), None
