"""The RMSNorm of megatron's local layers, usable with sequence parallelism.

Without Transformer Engine (or Apex) megatron-core builds its norms with ``WrappedTorchNorm``,
which refuses ``sequence_parallel`` although an RMSNorm is computed token by token and so is
the same on a slice of the sequence. What sequence parallelism needs from a norm is that its
weight says so: each tensor-parallel rank then holds the weight's gradient for its own tokens
(or, for q/k norms, its own heads), and megatron's ``finalize_model_grads`` sums the weights
marked ``sequence_parallel`` over the tensor-parallel group. :class:`RMSNorm` is that norm;
:func:`with_sequence_parallel_norms` puts it in a layer spec in place of ``WrappedTorchNorm``.
"""

from __future__ import annotations

import torch


class RMSNorm(torch.nn.RMSNorm):
    """``torch.nn.RMSNorm`` built as megatron builds a norm (``config``, ``hidden_size``,
    ``eps``), its weight marked ``sequence_parallel`` when the config is."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-5, **_unused):
        if config.normalization != "RMSNorm":
            raise ValueError(f"normalization {config.normalization!r}: this norm is an RMSNorm")
        super().__init__(hidden_size, eps=eps)
        self.weight.sequence_parallel = config.sequence_parallel


def with_sequence_parallel_norms(spec):
    """``spec`` (a megatron block or layer spec, changed in place and returned) with every
    ``WrappedTorchNorm`` replaced by :class:`RMSNorm`."""
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    from slime_megatron.models.specs import replace_module

    return replace_module(spec, WrappedTorchNorm, RMSNorm)
