"""One decoder layer's cache in the running batch, by kind of layer.

Row i of every tensor belongs to the batch's request i. Each kind does what the batch asks of
it: take rows of a prefill (`from_prefill`), keep some rows (`select`), join two batches
(`join`), make room for more positions (`reserve`), and give a transformers cache layer for
the next forward (`layer`).

- `Columns` (attention layers): one column per position, left-padded to the batch's length,
  with spare columns that a decode step writes in place. It holds keys and values, and for a
  DeepSeek-sparse-attention layer (GLM-5's ``indexed_attention``) the indexer's keys too.
- `Recurrent` (``linear_attention`` layers: Qwen3-Next's gated delta-net): no position axis.
  A row holds its request's state after its last token: the causal convolution's last inputs
  (B, conv_dim, kernel) and the recurrent matrix (B, heads, k_dim, v_dim). Left padding keeps
  it exact: a padded position's input is zeroed (transformers masks it), so the state stays
  zero until the request's first real token, as if the prompt had run alone. Right padding
  would not (the state would go on decaying through the padding), which is why prefills pad on
  the left. Joining batches or dropping requests only picks rows: no padding ever touches it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicCache, DynamicIndexedLayer, DynamicLayer, LinearAttentionLayer

#: transformers' cache layer classes whose state the running batch can hold, by the class
#: `DynamicCache(config=...)` makes for each of a model's layers.
SUPPORTED = (DynamicLayer, DynamicIndexedLayer, LinearAttentionLayer)


def unsupported_layers(config) -> list[str]:
    """The names of the cache layer kinds of ``config`` that the CPU engine cannot hold (none: [])."""
    return sorted(
        {type(layer).__name__ for layer in DynamicCache(config=config).layers if type(layer) not in SUPPORTED}
    )


def from_prefill(layer, row_of: torch.Tensor, capacity: int) -> Columns | Recurrent:
    """The cache a prefill left in ``layer`` (a transformers cache layer), one row per request
    (``row_of[i]``: the prefill row of request i), with ``capacity`` columns for attention."""
    if isinstance(layer, LinearAttentionLayer):
        states = range(layer.number_of_states)
        return Recurrent(
            conv=[_rows(layer.conv_states[i], row_of) for i in states],
            recurrent=[_rows(layer.recurrent_states[i], row_of) for i in states],
        )
    indexer = layer.indexer_keys if isinstance(layer, DynamicIndexedLayer) else None
    return Columns(
        keys=_pad(layer.keys[row_of], 2, 0, capacity),
        values=_pad(layer.values[row_of], 2, 0, capacity),
        indexer_keys=None if indexer is None else _pad(indexer[row_of], 1, 0, capacity),
    )


@dataclass
class Columns:
    """An attention layer's cache: columns [:length] in use (the length is the batch's)."""

    keys: torch.Tensor  # (B, kv_heads, capacity, head_dim)
    values: torch.Tensor  # (B, kv_heads, capacity, v_head_dim)
    indexer_keys: torch.Tensor | None = None  # (B, capacity, index_head_dim): a DSA layer's indexer keys

    def _tensors(self) -> list[tuple[torch.Tensor | None, int]]:
        """Each tensor with its position axis."""
        return [(self.keys, 2), (self.values, 2), (self.indexer_keys, 1)]

    def _map(self, fn) -> Columns:
        return Columns(*(None if t is None else fn(t, axis) for t, axis in self._tensors()))

    def select(self, index: torch.Tensor, start: int) -> Columns:
        """Rows ``index``, from column ``start`` on."""
        return self._map(lambda t, axis: t.narrow(axis, start, t.shape[axis] - start)[index])

    def join(self, length: int, other: Columns, other_length: int, joined_length: int, capacity: int) -> Columns:
        """Rows of self then ``other``, each left-padded to ``joined_length`` columns in use."""

        def cat(mine: torch.Tensor | None, theirs: torch.Tensor | None, axis: int):
            if mine is None:
                return None
            return torch.cat(
                [
                    _pad(mine.narrow(axis, 0, length), axis, joined_length - length, capacity),
                    _pad(theirs.narrow(axis, 0, other_length), axis, joined_length - other_length, capacity),
                ]
            )

        return Columns(
            *(cat(mine, theirs, axis) for (mine, axis), (theirs, _) in zip(self._tensors(), other._tensors()))
        )

    def reserve(self, capacity: int) -> Columns:
        return self._map(lambda t, axis: _pad(t, axis, 0, capacity))

    def layer(self, length: int) -> _ColumnsLayer:
        return _ColumnsLayer(self, length)


@dataclass
class Recurrent:
    """A linear-attention layer's state, one entry per state the layer keeps (Qwen3-Next: one)."""

    conv: list[torch.Tensor]  # (B, conv_dim, kernel) the causal convolution's last inputs
    recurrent: list[torch.Tensor]  # (B, heads, k_dim, v_dim)

    def select(self, index: torch.Tensor, start: int) -> Recurrent:
        return Recurrent([c[index] for c in self.conv], [r[index] for r in self.recurrent])

    def join(self, length: int, other: Recurrent, other_length: int, joined_length: int, capacity: int) -> Recurrent:
        return Recurrent(
            [torch.cat(pair) for pair in zip(self.conv, other.conv)],
            [torch.cat(pair) for pair in zip(self.recurrent, other.recurrent)],
        )

    def reserve(self, capacity: int) -> Recurrent:
        return self

    def layer(self, length: int) -> _RecurrentLayer:
        return _RecurrentLayer(self)


class _ColumnsLayer(DynamicIndexedLayer):
    """A transformers cache layer that writes a forward's new keys / values (and indexer keys)
    into the spare columns of `Columns`' buffers instead of concatenating."""

    def __init__(self, columns: Columns, length: int):
        super().__init__()
        self.columns, self.length = columns, length
        self.keys, self.values = columns.keys[:, :, :length], columns.values[:, :, :length]
        self.dtype, self.device, self.is_initialized = columns.keys.dtype, columns.keys.device, True
        self.indexer_length = length

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self.length + key_states.shape[-2]
        self.columns.keys[:, :, self.length : end] = key_states
        self.columns.values[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = self.columns.keys[:, :, :end], self.columns.values[:, :, :end]
        return self.keys, self.values

    def update_indexer(self, indexer_key_states: torch.Tensor) -> torch.Tensor:
        end = self.indexer_length + indexer_key_states.shape[1]
        self.columns.indexer_keys[:, self.indexer_length : end] = indexer_key_states
        self.indexer_length = end
        return self.columns.indexer_keys[:, :end]


class _RecurrentLayer(LinearAttentionLayer):
    """A transformers linear-attention cache layer over `Recurrent`'s tensors: a decode step
    updates them in place (transformers copies the new state into them)."""

    def __init__(self, state: Recurrent):
        super().__init__(number_of_states=len(state.conv))
        for i, (conv, recurrent) in enumerate(zip(state.conv, state.recurrent)):
            self.conv_states[i], self.recurrent_states[i] = conv, recurrent
            self.conv_kernel_size[i] = conv.shape[-1]
            self.is_conv_states_initialized[i] = self.is_recurrent_states_initialized[i] = True
            self.has_previous_state[i] = True
        self.dtype, self.device = state.conv[0].dtype, state.conv[0].device


def _rows(tensor: torch.Tensor, row_of: torch.Tensor) -> torch.Tensor:
    return tensor[row_of]  # advanced indexing copies: each request owns its state


def _pad(tensor: torch.Tensor, axis: int, left: int, capacity: int) -> torch.Tensor:
    """``tensor`` placed ``left`` zero columns from the start of a zero tensor ``capacity`` wide on ``axis``."""
    shape = list(tensor.shape)
    shape[axis] = capacity
    out = tensor.new_zeros(shape)
    out.narrow(axis, left, tensor.shape[axis]).copy_(tensor)
    return out
