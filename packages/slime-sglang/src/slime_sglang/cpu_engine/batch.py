"""The running batch: requests decoded together, each with its own per-layer cache.

Row i of every cache tensor belongs to ``requests[i]``. An attention layer's cache
(`layer_cache.Columns`) holds one column per position: caches of different lengths share
one buffer per layer by left padding, a mask marks the real positions, and every forward
passes explicit position ids (each row's true position), so a padded row computes what it
would alone. A linear-attention layer's cache (`layer_cache.Recurrent`, Qwen3-Next) is a
fixed-size state per row, which left padding leaves exact. Requests join by :func:`merge`
(the shorter side is padded on the left) and leave by :func:`keep` (their rows are dropped,
then the columns only padding still uses).

The column buffers have spare columns: a decode step writes its one new column in place instead
of concatenating (copying) the whole cache, which would cost more than the model itself
for long outputs. When the spare columns run out, the capacity doubles.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, DynamicCache

from slime_core.multimodal.vision_inputs import without_placeholders
from slime_sglang.cpu_engine import layer_cache, vision
from slime_sglang.cpu_engine.request import GenerateRequest

MIN_SPARE_COLUMNS = 32


@dataclass
class RunningBatch:
    requests: list[GenerateRequest]
    layers: list  # per decoder layer, a layer_cache.Columns or layer_cache.Recurrent
    mask: torch.Tensor  # (B, capacity) int64: 1 where the cache holds a real token, 0 for padding
    length: int  # columns in use, the same for every row (left padding)

    @property
    def capacity(self) -> int:
        return self.mask.shape[1]


def prefill(model, requests: list[GenerateRequest]) -> tuple[RunningBatch, torch.Tensor]:
    """Run the prompts (left-padded into one batch); returns the batch and the logits of each
    prompt's last position (B, V).

    Requests with the same prompt (the samples of a GRPO group) share one row of the forward,
    whose cache (keys and values, or recurrent state) is then copied to each of them, as
    SGLang's radix cache shares a common prefix: a rollout of 32 prompts × 8 samples prefills
    32 rows, not 256."""
    prompts, row_of = prompt_rows(requests)
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    inputs = {"position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
    if vision.is_vision_language(model.config):
        firsts = {row: r for r, row in zip(requests, row_of.tolist())}  # a request of each row
        inputs, offsets = vision.prefill_inputs(model, ids, mask, [firsts[row].images for row in range(len(prompts))])
        for request, row in zip(requests, row_of.tolist()):
            request.position_offset = int(offsets[row])
    cache = DynamicCache(config=model.config.get_text_config())
    logits = _forward(model, ids, mask, cache, **inputs)
    capacity = width + max(MIN_SPARE_COLUMNS, width)
    return RunningBatch(
        requests,
        layers=[layer_cache.from_prefill(layer, row_of, capacity) for layer in cache.layers],
        mask=_pad_mask(mask[row_of], 0, capacity),
        length=width,
    ), logits[row_of]


def prompt_rows(requests: list[GenerateRequest]) -> tuple[list[list[int]], torch.Tensor]:
    """The distinct prompts of ``requests`` (the rows of their prefill, left-padded to the longest:
    equal prompt ids with equal images, `_prompt_key`) and the row of each request."""
    rows: dict[tuple, int] = {}
    row_of = torch.tensor([rows.setdefault(_prompt_key(r), len(rows)) for r in requests])
    return [list(ids) for ids, _ in rows], row_of


def decode(model, batch: RunningBatch) -> torch.Tensor:
    """Feed every request's latest token; extends the batch's caches and returns (B, V) logits."""
    _reserve(batch, batch.length + 1)
    ids = torch.tensor([[r.output_ids[-1]] for r in batch.requests])
    positions = torch.tensor([[len(r.input_ids) + len(r.output_ids) - 1 + r.position_offset] for r in batch.requests])
    batch.mask[:, batch.length] = 1
    cache = Cache(layers=[layer.layer(batch.length) for layer in batch.layers])
    logits = _forward(model, ids, batch.mask[:, : batch.length + 1], cache, position_ids=positions)
    batch.length += 1
    return logits


def merge(a: RunningBatch, b: RunningBatch) -> RunningBatch:
    """One batch holding the rows of ``a`` then ``b``."""
    length = max(a.length, b.length)
    capacity = length + max(MIN_SPARE_COLUMNS, a.capacity - a.length, b.capacity - b.length)
    mask = torch.cat(
        [
            _pad_mask(a.mask[:, : a.length], length - a.length, capacity),
            _pad_mask(b.mask[:, : b.length], length - b.length, capacity),
        ]
    )
    return RunningBatch(
        a.requests + b.requests,
        layers=[la.join(a.length, lb, b.length, length, capacity) for la, lb in zip(a.layers, b.layers)],
        mask=mask,
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
        layers=[layer.select(index, start) for layer in batch.layers],
        mask=mask[:, start:],
        length=batch.length - start,
    )


def _reserve(batch: RunningBatch, columns: int) -> None:
    """Make the buffers hold at least ``columns`` columns (doubling their capacity)."""
    if columns <= batch.capacity:
        return
    capacity = max(columns, 2 * batch.capacity)
    batch.layers = [layer.reserve(capacity) for layer in batch.layers]
    batch.mask = _pad_mask(batch.mask, 0, capacity)


def _prompt_key(request: GenerateRequest) -> tuple:
    """Requests with equal keys prefill as one row: the same prompt ids, and the same images."""
    return tuple(request.input_ids), request.images.key if request.images is not None else None


def _forward(model, ids, mask, cache: Cache, **inputs) -> torch.Tensor:
    """(B, V) logits at the last position; ``inputs``: position_ids, and a prefill's images. A
    vision-language model's never pick an image placeholder (`without_placeholders`)."""
    out = model(input_ids=ids, attention_mask=mask, cache=cache, use_cache=True, logits_to_keep=1, **inputs)
    if vision.is_vision_language(model.config):
        return without_placeholders(out.logits[:, -1], model.config)
    return out.logits[:, -1]


def _pad_mask(mask: torch.Tensor, left: int, capacity: int) -> torch.Tensor:
    """A (B, L) mask placed ``left`` zero columns from the start of a (B, capacity) zero mask."""
    out = mask.new_zeros((mask.shape[0], capacity))
    out[:, left : left + mask.shape[1]] = mask
    return out
