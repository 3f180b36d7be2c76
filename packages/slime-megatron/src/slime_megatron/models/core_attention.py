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
"""

from __future__ import annotations

import torch.nn.functional as F
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.enums import AttnMaskType


class SDPACoreAttention(DotProductAttention):
    """megatron's local core attention, computed by ``scaled_dot_product_attention`` where it
    applies (see the module docstring)."""

    def forward(
        self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None, packed_seq_params=None
    ):
        if not self._fused_applies(attention_mask, attn_mask_type, attention_bias, packed_seq_params):
            return super().forward(query, key, value, attention_mask, attn_mask_type, attention_bias, packed_seq_params)
        return self.fused_forward(query, key, value)

    def fused_forward(self, query, key, value):
        """query [sq, b, heads, d], key/value [sk, b, groups, d|dv] → context [sq, b, heads·dv]."""
        q, k, v = (x.permute(1, 2, 0, 3) for x in (query, key, value))  # [b, heads|groups, s, d]
        context = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=self.softmax_scale, enable_gqa=q.shape[1] != k.shape[1]
        )
        return context.permute(2, 0, 1, 3).reshape(query.shape[0], query.shape[1], -1)  # [sq, b, heads·dv]

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
