"""Token log-probs from logits in two Triton kernels, for CUDA.

`slime_core.algorithms.logprobs` computes log softmax(z / τ)[token] a chunk of rows at a time
in float32 torch ops: each chunk is copied to float32, scaled, reduced by ``logsumexp``
(several passes), and its backward builds the softmax again in float32 before writing the
gradient. On an H100 that was about a fifth of an FSDP step's GPU time for a 152k-token
vocabulary (`benchmarks/fsdp_gpu.py`). Here each pass reads the logits once in their own dtype:

- forward, one program per row: an online (running max, running sum) logsumexp over the
  vocabulary in float32 registers, then log p of the row's token; it keeps the (N,) float32
  logsumexp for the backward;
- backward, one program per (row, vocabulary block): g·(onehot − p)/τ written straight into
  the gradient in the logits' dtype.

Same math as the torch path (float32 accumulation, the gradient in the logits' dtype), to
float32 rounding. Used by `log_probs_from_logits` for CUDA logits without a top-p keep mask
when Triton is installed; everything else takes the torch path. Importing this module
imports Triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

FORWARD_BLOCK = 2048  # vocabulary columns a forward program reads per iteration
BACKWARD_BLOCK = 4096  # vocabulary columns per backward program


@triton.jit
def _forward_kernel(logits, row_stride, tokens, out, lse_out, vocab, inv_temperature, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = logits + row * row_stride
    running_max = tl.full([BLOCK], float("-inf"), tl.float32)
    running_sum = tl.zeros([BLOCK], tl.float32)
    for start in range(0, vocab, BLOCK):
        columns = start + tl.arange(0, BLOCK)
        z = tl.load(base + columns, mask=columns < vocab, other=float("-inf")).to(tl.float32) * inv_temperature
        new_max = tl.maximum(running_max, z)
        seen = new_max > float("-inf")  # a lane past the vocabulary stays empty
        running_sum = running_sum * tl.where(seen, tl.exp(running_max - new_max), 1.0) + tl.where(
            seen, tl.exp(z - new_max), 0.0
        )
        running_max = new_max
    row_max = tl.max(running_max, axis=0)
    lanes = tl.where(running_max > float("-inf"), running_sum * tl.exp(running_max - row_max), 0.0)
    lse = row_max + tl.log(tl.sum(lanes, axis=0))
    token = tl.load(tokens + row)
    z_token = tl.load(base + token).to(tl.float32) * inv_temperature
    tl.store(out + row, z_token - lse)
    tl.store(lse_out + row, lse)


@triton.jit
def _backward_kernel(
    logits, row_stride, tokens, lse, grad_out, grad, grad_stride, vocab, inv_temperature, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = columns < vocab
    z = tl.load(logits + row * row_stride + columns, mask=inside, other=0.0).to(tl.float32) * inv_temperature
    p = tl.exp(z - tl.load(lse + row))
    g = tl.load(grad_out + row).to(tl.float32)
    onehot = tl.where(columns == tl.load(tokens + row), 1.0, 0.0)
    value = g * (onehot - p) * inv_temperature
    tl.store(grad + row * grad_stride + columns, value.to(grad.dtype.element_ty), mask=inside)


class TritonLogProbs(torch.autograd.Function):
    """log softmax(logits / temperature)[tokens] of (N, V) CUDA logits (last dimension
    contiguous) → (N,) float32."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
        rows, vocab = logits.shape
        out = torch.empty(rows, dtype=torch.float32, device=logits.device)
        lse = torch.empty_like(out)
        if rows:
            _forward_kernel[(rows,)](
                logits, logits.stride(0), tokens, out, lse, vocab, 1.0 / temperature, BLOCK=FORWARD_BLOCK, num_warps=8
            )
        ctx.save_for_backward(logits, tokens, lse)
        ctx.temperature = temperature
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        logits, tokens, lse = ctx.saved_tensors
        rows, vocab = logits.shape
        grad = torch.empty_like(logits)
        if rows:
            grid = (rows, triton.cdiv(vocab, BACKWARD_BLOCK))
            _backward_kernel[grid](
                logits,
                logits.stride(0),
                tokens,
                lse,
                grad_out.contiguous(),
                grad,
                grad.stride(0),
                vocab,
                1.0 / ctx.temperature,
                BLOCK=BACKWARD_BLOCK,
                num_warps=8,
            )
        return grad, None, None
