"""The running batch: requests decoded together, each with its own key/value cache.

Row i of every cache tensor belongs to ``requests[i]``. Caches of different lengths share
one buffer per layer by left padding: a mask marks the real positions, and every forward
passes explicit position ids (each row's true position), so a padded row computes what it
would alone. Requests join by :func:`merge` (the shorter side is padded on the left) and
leave by :func:`keep` (their rows are dropped, then the columns only padding still uses).

The buffers have spare columns: a decode step writes its one new column in place instead
of concatenating (copying) the whole cache, which would cost more than the model itself
for long outputs. When the spare columns run out, the capacity doubles.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from slime_sglang.cpu_engine.request import GenerateRequest

MIN_SPARE_COLUMNS = 32


@dataclass
class RunningBatch:
    requests: list[GenerateRequest]
    keys: list[torch.Tensor]  # per layer (B, kv_heads, capacity, head_dim); columns [:length] in use
    values: list[torch.Tensor]  # same shapes as keys
    mask: torch.Tensor  # (B, capacity) int64: 1 where the cache holds a real token, 0 for padding
    length: int  # columns in use, the same for every row (left padding)


def prefill(model, requests: list[GenerateRequest]) -> tuple[RunningBatch, torch.Tensor]:
    """Run the prompts (left-padded into one batch); returns the batch and the logits of each
    prompt's last position (B, V).

    Requests with the same prompt (the samples of a GRPO group) share one row of the forward,
    whose keys and values are then copied to each of them, as SGLang's radix cache shares a
    common prefix: a rollout of 32 prompts × 8 samples prefills 32 rows, not 256."""
    rows: dict[tuple[int, ...], int] = {}
    row_of = torch.tensor([rows.setdefault(tuple(r.input_ids), len(rows)) for r in requests])
    prompts = [list(prompt) for prompt in rows]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    logits = _forward(model, ids, mask, positions, cache)
    capacity = width + max(MIN_SPARE_COLUMNS, width)
    return RunningBatch(
        requests,
        keys=[_pad(layer.keys[row_of], 0, capacity) for layer in cache.layers],
        values=[_pad(layer.values[row_of], 0, capacity) for layer in cache.layers],
        mask=_pad(mask[row_of], 0, capacity),
        length=width,
    ), logits[row_of]


def decode(model, batch: RunningBatch) -> torch.Tensor:
    """Feed every request's latest token; extends the batch's caches and returns (B, V) logits."""
    _reserve(batch, batch.length + 1)
    ids = torch.tensor([[r.output_ids[-1]] for r in batch.requests])
    positions = torch.tensor([[len(r.input_ids) + len(r.output_ids) - 1] for r in batch.requests])
    batch.mask[:, batch.length] = 1
    cache = Cache(layers=[_BufferLayer(k, v, batch.length) for k, v in zip(batch.keys, batch.values)])
    logits = _forward(model, ids, batch.mask[:, : batch.length + 1], positions, cache)
    batch.length += 1
    return logits


def merge(a: RunningBatch, b: RunningBatch) -> RunningBatch:
    """One batch holding the rows of ``a`` then ``b``."""
    length = max(a.length, b.length)
    capacity = length + max(MIN_SPARE_COLUMNS, a.keys[0].shape[2] - a.length, b.keys[0].shape[2] - b.length)

    def join(x: torch.Tensor, x_length: int, y: torch.Tensor, y_length: int) -> torch.Tensor:
        return torch.cat([_pad(x[..., :x_length, :] if x.dim() == 4 else x[:, :x_length], length - x_length, capacity),
                          _pad(y[..., :y_length, :] if y.dim() == 4 else y[:, :y_length], length - y_length, capacity)])

    return RunningBatch(
        a.requests + b.requests,
        keys=[join(ka, a.length, kb, b.length) for ka, kb in zip(a.keys, b.keys)],
        values=[join(va, a.length, vb, b.length) for va, vb in zip(a.values, b.values)],
        mask=join(a.mask, a.length, b.mask, b.length),
        length=length,
    )


def keep(batch: RunningBatch, rows: list[int]) -> RunningBatch | None:
    """The batch reduced to ``rows`` (None when empty), without columns that are padding in every row."""
    if not rows:
        return None
    index = torch.tensor(rows)
    mask = batch.mask[index]
    start = int(mask[:, : batch.length].any(dim=0).int().argmax())  # first column a remaining row uses
    return RunningBatch(
        [batch.requests[i] for i in rows],
        keys=[k[index, :, start:] for k in batch.keys],
        values=[v[index, :, start:] for v in batch.values],
        mask=mask[:, start:],
        length=batch.length - start,
    )


class _BufferLayer(DynamicLayer):
    """A cache layer that writes new keys / values into spare columns of preallocated buffers."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int):
        super().__init__()
        self.buffers, self.length = (keys, values), length
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self.length + key_states.shape[-2]
        keys, values = self.buffers
        keys[:, :, self.length: end] = key_states
        values[:, :, self.length: end] = value_states
        self.length = end
        self.keys, self.values = keys[:, :, :end], values[:, :, :end]
        return self.keys, self.values


def _reserve(batch: RunningBatch, columns: int) -> None:
    """Make the buffers hold at least ``columns`` columns (doubling their capacity)."""
    capacity = batch.mask.shape[1]
    if columns <= capacity:
        return
    capacity = max(columns, 2 * capacity)
    batch.keys = [_pad(k, 0, capacity) for k in batch.keys]
    batch.values = [_pad(v, 0, capacity) for v in batch.values]
    batch.mask = _pad(batch.mask, 0, capacity)


def _forward(model, ids, mask, positions, cache: Cache) -> torch.Tensor:
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                use_cache=True, logits_to_keep=1)
    return out.logits[:, -1]


def _pad(tensor: torch.Tensor, left: int, capacity: int) -> torch.Tensor:
    """``tensor`` (a (B, H, L, D) cache or a (B, L) mask) placed ``left`` zero columns from
    the start of a zero tensor ``capacity`` columns wide."""
    dim = 2 if tensor.dim() == 4 else 1
    shape = list(tensor.shape)
    shape[dim] = capacity
    out = tensor.new_zeros(shape)
    out.narrow(dim, left, tensor.shape[dim]).copy_(tensor)
    return out
