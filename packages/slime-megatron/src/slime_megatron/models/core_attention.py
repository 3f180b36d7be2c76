"""Causal core attention through torch's ``scaled_dot_product_attention``.

megatron-core's local ``DotProductAttention`` (the only one without Transformer Engine)
materialises every (b, heads, s, s) score in float32 and keeps the probabilities for the
backward: a 0.45 B Qwen3 with 4,096-token rows ran out of an H100's 80 GB in its first
micro-batch. :class:`SDPACoreAttention` computes the same causal attention with torch's fused
kernel (flash on CUDA in bf16/fp16, the fused CPU kernel elsewhere) without a score matrix,
with grouped-query heads shared inside the kernel. It takes over whenever the local module's
extras are off (no explicit mask, bias, packed sequences, sliding window, softmax offset,
query-key layer scaling or attention dropout in training) and otherwise defers to
megatron's own forward.

Rows are right-padded (`slime_megatron.inputs`): causal attention keeps every real token
from the padding after it, which is why no mask is needed.

With context parallelism (`slime_megatron.context`) each rank holds two chunks of every row
(chunks r and 2·CP − 1 − r of 2·CP): :meth:`SDPACoreAttention.context_parallel_forward`
all-gathers the keys and values of the context-parallel group (its backward reduce-scatters
their gradients back to the ranks that hold them), puts them in global order, and lets each
of the rank's chunks attend to the keys up to its own end with the causal mask aligned to the
lower right (its global positions). megatron's local attention refuses context parallelism
(Transformer Engine's ring attention is the only one it has), so it is built without it and
this module does the exchange; what it would otherwise defer to megatron for (the extras
above) is refused when the run is configured (``slime_megatron.plugin``).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.enums import AttnMaskType
from torch.nn.attention.bias import causal_lower_right

from slime_megatron.context import all_gather_sequence


class SDPACoreAttention(DotProductAttention):
    """megatron's local core attention, computed by ``scaled_dot_product_attention`` where it
    applies, and across the context-parallel ranks (see the module docstring)."""

    def __init__(self, config, *args, **kwargs):
        without_context_parallel = copy.copy(config)  # megatron's local attention asserts CP 1
        without_context_parallel.context_parallel_size = 1
        super().__init__(without_context_parallel, *args, **kwargs)
        self.config = config
        cp = config.context_parallel_size > 1
        self.cp_group = parallel_state.get_context_parallel_group() if cp else None

    def forward(
        self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None, packed_seq_params=None
    ):
        if not self._fused_applies(attention_mask, attn_mask_type, attention_bias, packed_seq_params):
            # invariant: the plugin's config checks refuse these extras with context parallelism
            assert self.cp_group is None, "megatron's local attention cannot split sequences over CP ranks"
            return super().forward(query, key, value, attention_mask, attn_mask_type, attention_bias, packed_seq_params)
        if self.cp_group is not None:
            return self.context_parallel_forward(query, key, value)
        return self.fused_forward(query, key, value)

    def fused_forward(self, query, key, value, mask=None):
        """query [sq, b, heads, d], key/value [sk, b, groups, d|dv] → context [sq, b, heads·dv];
        causal, or under ``mask`` (an SDPA attention mask)."""
        q, k, v = (x.permute(1, 2, 0, 3) for x in (query, key, value))  # [b, heads|groups, s, d]
        context = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            is_causal=mask is None,
            scale=self.softmax_scale,
            enable_gqa=q.shape[1] != k.shape[1],
        )
        return context.permute(2, 0, 1, 3).reshape(query.shape[0], query.shape[1], -1)  # [sq, b, heads·dv]

    def context_parallel_forward(self, query, key, value):
        """query/key/value of this CP rank's two chunks [2·c, b, heads|groups, d|dv] → context
        [2·c, b, heads·dv]: each chunk attends to every global position up to its own."""
        size, rank = self.cp_group.size(), self.cp_group.rank()
        chunk = query.shape[0] // 2
        order = global_order(size, chunk, query.device)
        key, value = (all_gather_sequence(x, self.cp_group).index_select(0, order) for x in (key, value))
        contexts = []
        for half, index in enumerate((rank, 2 * size - 1 - rank)):
            end = (index + 1) * chunk  # the chunk's last global position + 1
            mask = causal_lower_right(chunk, end)
            contexts.append(self.fused_forward(query[half * chunk : (half + 1) * chunk], key[:end], value[:end], mask))
        return torch.cat(contexts, dim=0)

    def _fused_applies(self, attention_mask, attn_mask_type, attention_bias, packed_seq_params) -> bool:
        mask_type = attn_mask_type if attn_mask_type is not None else self.attn_mask_type
        dropout = self.attention_dropout.p if self.training else 0.0
        return (
            mask_type == AttnMaskType.causal
            and attention_mask is None
            and attention_bias is None
            and packed_seq_params is None
            and self.softmax_offset is None
            and dropout == 0.0
            and self.scale_mask_softmax.window_size is None
            and not self.config.apply_query_key_layer_scaling
        )


def global_order(size: int, chunk: int, device) -> torch.Tensor:
    """(2·size·chunk,) the rows of every CP rank's gathered chunks (rank j: chunks j and
    2·size − 1 − j, one after the other) that put them in global order."""
    starts = [k * 2 * chunk if k < size else (2 * size - 1 - k) * 2 * chunk + chunk for k in range(2 * size)]
    return torch.cat([torch.arange(start, start + chunk) for start in starts]).to(device)
