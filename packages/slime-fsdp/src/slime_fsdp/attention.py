"""``slime_packed``: attention for packed rows without a (T, T) mask.

A packed row holds several samples end to end, with position ids restarting at 0 for each
(see `inputs.packed`). Attention must stay inside each sample. transformers' sdpa and eager
paths need a block-diagonal (T, T) mask for that, which costs O(T²) memory and computes every
cross-sample score only to mask it out. This implementation reads the sample boundaries from
the position ids instead:

- on CUDA in bf16/fp16, one call of torch's varlen flash kernel
  (``torch.nn.attention.varlen.varlen_attn``) over all samples, as flash-attention-2 does;
- elsewhere (CPU, float32), sdpa over windows of consecutive samples of at most
  ``WINDOW`` tokens with a block-diagonal causal mask (a longer sample is a window of its own,
  plainly causal): memory O(max(WINDOW, longest sample)²). Short samples share one call, since
  one sdpa call per sample costs more in call overhead than in arithmetic (a rollout of
  thousands of 16-token samples made thousands of calls per layer).

Padded rows (right padding, position ids 0..W-1) are one sample per row; causal attention never
lets a real token see the padding after it, so no padding mask is needed either.
Registered with transformers' attention and mask interfaces by `register()`.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F

NAME = "slime_packed"
WINDOW = 256  # tokens of consecutive short samples that share one masked sdpa call on CPU


def register() -> None:
    """Make ``attn_implementation="slime_packed"`` loadable (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, packed_attention)
    AttentionMaskInterface.register(NAME, _no_mask)


def _no_mask(*args, **kwargs) -> None:
    """The model builds no mask: boundaries come from the position ids."""
    return None


def packed_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                     position_ids: torch.Tensor | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """query (B, Hq, T, D), key/value (B, Hkv, T, D) → ((B, T, Hq, D), None), causal within each
    sample; samples start where ``position_ids`` is 0."""
    if position_ids is None:
        raise ValueError(f"{NAME} attention needs position_ids (restarting at 0 per sample) in the model's forward call")
    batch, heads, length, dim = query.shape
    starts = _sample_starts(position_ids.reshape(-1))
    q, k, v = (x.transpose(1, 2).reshape(batch * length, x.shape[1], dim) for x in (query, key, value))
    dropout = dropout if module.training else 0.0
    if _use_varlen(q, dropout):
        out = _varlen(q, k, v, starts, scaling)
    else:
        out = _windowed_sdpa(q, k, v, starts, scaling, dropout)
    return out.reshape(batch, length, heads, dim), None


def _sample_starts(flat_positions: torch.Tensor) -> list[int]:
    """Offsets where a sample begins, plus the total length: [0, s1, s2, ..., T]."""
    starts = torch.nonzero(flat_positions == 0).flatten().tolist()
    if not starts or starts[0] != 0:
        starts = [0] + starts
    return starts + [flat_positions.numel()]


def _windowed_sdpa(q, k, v, starts: list[int], scaling, dropout: float) -> torch.Tensor:
    """sdpa on each window of consecutive samples (q/k/v: (T, H, D)); GQA heads are shared
    inside sdpa."""
    chunks = []
    for window in _windows(starts, WINDOW):
        begin, end = window[0], window[-1]
        qi, ki, vi = (x[begin:end].transpose(0, 1)[None] for x in (q, k, v))
        mask = None if len(window) == 2 else _block_causal_mask(window, q.device)
        out = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, is_causal=mask is None, scale=scaling,
                                             dropout_p=dropout, enable_gqa=qi.shape[1] != ki.shape[1])
        chunks.append(out[0].transpose(0, 1))
    return torch.cat(chunks)


def _windows(starts: list[int], size: int) -> list[list[int]]:
    """Sample boundaries grouped into windows of consecutive samples of at most ``size``
    tokens (a longer sample alone); each window is its boundaries [b0, b1, ..., bn]."""
    windows = [[starts[0]]]
    for end in starts[1:]:
        window = windows[-1]
        if len(window) > 1 and end - window[0] > size:
            windows.append([window[-1]])
        windows[-1].append(end)
    return windows


def _block_causal_mask(window: list[int], device) -> torch.Tensor:
    """(L, L) boolean mask: causal, and only inside each sample of the window."""
    lengths = torch.tensor([end - begin for begin, end in zip(window, window[1:])], device=device)
    sample = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths)
    same = sample[:, None] == sample[None, :]
    return same & torch.ones_like(same).tril()


def _use_varlen(q: torch.Tensor, dropout: float) -> bool:
    """torch's varlen flash kernel runs on CUDA in half precision, without dropout."""
    return q.is_cuda and q.dtype in (torch.bfloat16, torch.float16) and dropout == 0.0 and _varlen_attn() is not None


def _varlen_attn():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def _varlen(q, k, v, starts: list[int], scaling) -> torch.Tensor:
    """All samples in one varlen flash call (cumulative sequence offsets = ``starts``)."""
    varlen_attn = _varlen_attn()
    params = inspect.signature(varlen_attn).parameters
    if q.shape[1] != k.shape[1] and "enable_gqa" not in params:
        k, v = (x.repeat_interleave(q.shape[1] // x.shape[1], dim=1) for x in (k, v))
    kwargs = {"scale": scaling}
    if "enable_gqa" in params:
        kwargs["enable_gqa"] = q.shape[1] != k.shape[1]
    if "window_size" in params:
        kwargs["window_size"] = (-1, 0)  # causal
    else:
        kwargs["is_causal"] = True
    cu = torch.tensor(starts, device=q.device, dtype=torch.int32)
    longest = max(end - begin for begin, end in zip(starts, starts[1:]))
    return varlen_attn(q, k, v, cu, cu, longest, longest, **kwargs)
