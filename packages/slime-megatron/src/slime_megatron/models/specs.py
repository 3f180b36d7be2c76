"""Edits of megatron-core layer specs: swap one module class for another everywhere in a spec.

Megatron builds its layers from nested ``ModuleSpec`` dataclasses; where the local (non-
Transformer-Engine) spec of megatron-core 0.16 cannot build an architecture,
:func:`replace_module` puts a module of ours in place of megatron's: the norms
(`slime_megatron.models.norms`), the core attention (:class:`SDPACoreAttention`, and for
multi-latent attention :class:`MLACoreAttention`), GLM-4's output projections with their norms
(:class:`PostNormRowParallelLinear`). Importing this module imports megatron.
"""

from __future__ import annotations

import dataclasses

from megatron.core.tensor_parallel import RowParallelLinear
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.utils import divide

from slime_megatron.models.core_attention import SDPACoreAttention
from slime_megatron.models.norms import RMSNorm


def replace_module(spec, old: type, new: type):
    """``spec`` (a megatron block or layer spec, changed in place and returned) with every
    ``old`` class replaced by ``new``."""

    def visit(node):
        if node is old:
            return new
        if isinstance(node, list):
            return [visit(item) for item in node]
        if isinstance(node, ModuleSpec) or dataclasses.is_dataclass(node) and not isinstance(node, type):
            for field in dataclasses.fields(node):
                setattr(node, field.name, visit(getattr(node, field.name)))
        return node

    return visit(spec)


def with_fused_core_attention(spec):
    """``spec`` with megatron's local ``DotProductAttention`` replaced by
    :class:`~slime_megatron.models.core_attention.SDPACoreAttention` (no score matrix)."""
    return replace_module(spec, DotProductAttention, SDPACoreAttention)


class MLACoreAttention(SDPACoreAttention):
    """megatron-core 0.16's multi-latent attention builds its core attention with the key and
    value head sizes (``k_channels``, ``v_channels``), which only Transformer Engine's accepts;
    this is the local core attention (fused, :class:`SDPACoreAttention`) taking them: its output is ``v_channels``
    wide per
    head (the keys' size needs nothing: the scale comes from MLA as ``softmax_scale``). Without
    them (megatron's ``Attention`` base builds one first, which MLA replaces) it is the local one."""

    def __init__(self, config, *args, k_channels: int | None = None, v_channels: int | None = None, **kwargs):
        super().__init__(config, *args, **kwargs)
        if v_channels is not None:
            self.hidden_size_per_partition = divide(
                v_channels * config.num_attention_heads, config.tensor_model_parallel_size
            )


def with_mla_core_attention(spec):
    """``spec`` with megatron's local ``DotProductAttention`` replaced by :class:`MLACoreAttention`."""
    return replace_module(spec, DotProductAttention, MLACoreAttention)


class PostNormRowParallelLinear(RowParallelLinear):
    """megatron's ``RowParallelLinear`` whose output (all-reduced over tensor-parallel ranks, or
    with sequence parallelism reduce-scattered to this rank's tokens) goes through an RMSNorm,
    ``post_layernorm``: GLM-4's norms after the attention and after the MLP."""

    def __init__(self, input_size: int, output_size: int, *, config, **kwargs):
        super().__init__(input_size, output_size, config=config, **kwargs)
        self.post_layernorm = RMSNorm(config, output_size, eps=config.layernorm_epsilon)

    def forward(self, input_, *args, **kwargs):
        output, bias = super().forward(input_, *args, **kwargs)
        assert bias is None, "a post-norm projection has no bias (add_bias_linear is off)"
        return self.post_layernorm(output), bias
