"""Per-token log-probs and entropy from logits, a chunk of rows at a time.

For a long response and a large vocabulary the logits are the biggest tensor of a training
step (T=8192, V=152k in bf16: 2.5 GB). ``log_softmax(logits.float())`` makes a float32 copy
(5 GB) and keeps a float32 result of the same size alive for the backward. Here the float32
work happens on ``chunk_size`` rows at a time, in a custom autograd function:

- forward: each chunk is upcast to float32, divided by the temperature and reduced to one
  number per row (log-prob of the token, or entropy) plus its logsumexp;
- backward keeps only the logits (already alive; saved by reference, not copied), the tokens /
  keep mask, and per-row float32 logsumexp (and entropy). It recomputes each chunk's softmax,
  writing the gradient into one tensor of the logits' shape and dtype, the only full-size
  allocation. Peak extra memory is a few float32 chunks of (chunk_size, V).

Both functions accept an optional top-p ``keep_mask`` (same shape as the logits, True for
kept tokens): dropped logits become -inf, so the distribution renormalises over the kept
tokens. The scored tokens must be kept ones. `nucleus_keep_mask` builds the mask from the
nuclei the rollout engine sampled from (top-p replay, ``Sample.rollout_top_p_token_ids``), for
the whole vocabulary or one tensor-parallel slice of it.

Double backward is not supported. Vocabulary-parallel logits (Megatron TP) need their own
all-reduces and are not handled here.
"""

import importlib.util

import torch
from torch.autograd.function import once_differentiable

DEFAULT_CHUNK_SIZE = 1024


def log_probs_from_logits(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = DEFAULT_CHUNK_SIZE,
    keep_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """log softmax(logits / temperature)[token], computed chunk_size rows at a time.

    Shapes: logits (..., V) any float dtype, tokens (...) int64, keep_mask (..., V) bool or
    None -> (...) float32 (float64 for float64 logits). ``chunk_size=None`` processes all
    rows at once. Differentiable with respect to the logits (the module docstring says what
    the backward keeps). CUDA logits in half, bfloat16 or float32 without a keep mask go
    through two Triton kernels instead (`slime_core.algorithms.logprobs_triton`; no chunks).
    """
    flat, keep = _flatten(logits, keep_mask)
    if keep is None and triton_applies(flat):
        from slime_core.algorithms.logprobs_triton import TritonLogProbs

        return TritonLogProbs.apply(flat, tokens.reshape(-1), temperature).view(tokens.shape)
    out = _ChunkedLogProbs.apply(flat, tokens.reshape(-1), keep, temperature, chunk_size)
    return out.view(tokens.shape)


def entropy_from_logits(
    logits: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = DEFAULT_CHUNK_SIZE,
    keep_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """H = -Σ_v p_v·log p_v with p = softmax(logits / temperature), chunk_size rows at a time.

    Shapes: logits (..., V), keep_mask (..., V) bool or None -> (...) float32. Differentiable:
    dH/dz_v = -p_v·(log p_v + H) (times 1/temperature for the logits).
    """
    flat, keep = _flatten(logits, keep_mask)
    return _ChunkedEntropy.apply(flat, keep, temperature, chunk_size).view(logits.shape[:-1])


def nucleus_keep_mask(
    token_ids: list[list[int]],
    offsets: list[list[int]],
    targets: torch.Tensor,
    vocab_width: int,
    vocab_start: int = 0,
) -> torch.Tensor:
    """The (N, vocab_width) bool keep mask of N scored response tokens from their nuclei.

    The rows are the response tokens of the samples one after the other, as ``targets`` (N,)
    are; sample s's token t was drawn from ``token_ids[s][offsets[s][t]:offsets[s][t + 1]]``.
    The columns are vocabulary ids [vocab_start, vocab_start + vocab_width): the whole
    vocabulary, or one tensor-parallel rank's slice. A row keeps its nucleus ids in that range
    and its target; a token with an empty nucleus (tool output) keeps every column. The target
    is kept because an engine's sampling kernel may draw a token just outside the nucleus it
    reports; its log-prob is then over nucleus + target, as SGLang's top-p patch computes it.
    """
    rows, ids, empty = _nucleus_entries(token_ids, offsets)
    if len(empty) != len(targets):
        raise ValueError(
            f"nuclei for {len(empty)} response tokens but {len(targets)} targets; "
            "the offsets must have one entry more than each sample's response tokens"
        )
    device = targets.device
    keep = torch.zeros((len(targets), vocab_width), dtype=torch.bool, device=device)
    column = ids - vocab_start
    inside = (column >= 0) & (column < vocab_width)
    keep[rows[inside].to(device), column[inside].to(device)] = True
    keep[empty.to(device)] = True
    target_column = targets - vocab_start
    mine = (target_column >= 0) & (target_column < vocab_width)
    keep[mine.nonzero().squeeze(1), target_column[mine]] = True
    return keep


def _nucleus_entries(token_ids: list[list[int]], offsets: list[list[int]]):
    """Flattened nuclei: (E,) row of each id, (E,) the ids, (N,) whether a row's nucleus is empty."""
    rows, ids, empty, base = [], [], [], 0
    for sample_ids, sample_offsets in zip(token_ids, offsets, strict=True):
        counts = torch.as_tensor(sample_offsets, dtype=torch.long).diff()
        if int(counts.sum()) != len(sample_ids):
            raise ValueError(f"nucleus offsets cover {int(counts.sum())} ids but the sample has {len(sample_ids)}")
        rows.append(torch.arange(base, base + len(counts)).repeat_interleave(counts))
        ids.append(torch.as_tensor(sample_ids, dtype=torch.long))
        empty.append(counts == 0)
        base += len(counts)
    return torch.cat(rows), torch.cat(ids), torch.cat(empty)


class _ChunkedLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, tokens, keep, temperature, chunk_size):
        out = torch.empty(tokens.shape, dtype=_compute_dtype(logits), device=logits.device)  # (N,)
        lse = torch.empty_like(out)  # (N,) logsumexp of each scaled row
        for rows in _chunks(len(tokens), chunk_size):
            z = _scaled_chunk(logits, keep, rows, temperature)  # (C, V) float32
            lse[rows] = torch.logsumexp(z, dim=-1)
            out[rows] = z.gather(1, tokens[rows, None]).squeeze(1) - lse[rows]
        ctx.save_for_backward(logits, tokens, keep, lse)
        ctx.temperature, ctx.chunk_size = temperature, chunk_size
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        logits, tokens, keep, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)  # (N, V) in the logits' dtype
        for rows in _chunks(len(tokens), ctx.chunk_size):
            g = grad_out[rows, None]  # (C, 1)
            p = _scaled_chunk(logits, keep, rows, ctx.temperature).sub_(lse[rows, None]).exp_()
            p.mul_(-g).scatter_add_(1, tokens[rows, None], g)  # g·(onehot - p)
            grad[rows] = p.div_(ctx.temperature)
        return grad, None, None, None, None


class _ChunkedEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, keep, temperature, chunk_size):
        entropy = torch.empty(logits.shape[0], dtype=_compute_dtype(logits), device=logits.device)  # (N,)
        lse = torch.empty_like(entropy)
        for rows in _chunks(logits.shape[0], chunk_size):
            log_p = _scaled_chunk(logits, keep, rows, temperature)  # (C, V) float32, z for now
            lse[rows] = torch.logsumexp(log_p, dim=-1)
            p = log_p.sub_(lse[rows, None]).exp()
            entropy[rows] = -p.mul_(_finite(log_p)).sum(-1)  # -Σ p·log p
        ctx.save_for_backward(logits, keep, lse, entropy)
        ctx.temperature, ctx.chunk_size = temperature, chunk_size
        return entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        logits, keep, lse, entropy = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for rows in _chunks(logits.shape[0], ctx.chunk_size):
            log_p = _scaled_chunk(logits, keep, rows, ctx.temperature).sub_(lse[rows, None])  # (C, V)
            p = log_p.exp()
            log_p_plus_h = _finite(log_p).add_(entropy[rows, None])
            scale = (-grad_out[rows] / ctx.temperature)[:, None]
            grad[rows] = p.mul_(log_p_plus_h).mul_(scale)  # -g·p·(log p + H) / τ
        return grad, None, None, None


def _flatten(logits: torch.Tensor, keep_mask: torch.Tensor | None):
    """(..., V) -> (N, V) views (a copy only if the logits are not contiguous)."""
    vocab = logits.shape[-1]
    keep = None if keep_mask is None else keep_mask.reshape(-1, vocab)
    return logits.reshape(-1, vocab), keep


def triton_applies(logits: torch.Tensor) -> bool:
    """Whether `logprobs_triton` computes these (N, V) logits: CUDA, a kernel dtype, contiguous
    rows, and Triton installed."""
    return (
        logits.is_cuda
        and logits.dtype in (torch.bfloat16, torch.float16, torch.float32)
        and logits.stride(-1) == 1
        and importlib.util.find_spec("triton") is not None
    )


def _chunks(num_rows: int, chunk_size: int | None):
    step = num_rows if not chunk_size else chunk_size
    return [slice(start, min(start + step, num_rows)) for start in range(0, num_rows, max(step, 1))]


def _compute_dtype(logits: torch.Tensor) -> torch.dtype:
    """float32, or float64 for float64 logits (gradcheck)."""
    return torch.promote_types(logits.dtype, torch.float32)


def _scaled_chunk(logits, keep, rows: slice, temperature: float) -> torch.Tensor:
    """A fresh float32 copy of logits[rows] / temperature, dropped tokens at -inf; (C, V)."""
    z = logits[rows].to(_compute_dtype(logits), copy=True)
    if temperature != 1.0:
        z.div_(temperature)
    if keep is not None:
        z.masked_fill_(~keep[rows], float("-inf"))
    return z


def _finite(log_p: torch.Tensor) -> torch.Tensor:
    """log_p with its -inf set to 0 in place: tokens of probability 0 (dropped by a keep mask, or
    logits at -inf, as a vision-language model's placeholders) add p·log p = 0, not NaN."""
    return log_p.masked_fill_(torch.isneginf(log_p), 0.0)
