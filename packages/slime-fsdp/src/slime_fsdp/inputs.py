"""Model inputs for a micro-batch, packed or padded, and per-sample response log-probs.

Packed (``--use-dynamic-batch-size``): the samples are laid end to end in one row, with
position ids restarting at 0 for each. Attention must not cross samples: with a varlen
flash-attention implementation the restarting position ids tell the kernel where each
sequence starts; with any other implementation (CPU: sdpa or eager) a block-diagonal
causal mask does it.

slime's ``slime_packed`` attention (the default off flash-attention GPUs, see `attention`) reads the
boundaries from the position ids as well.

Padded (``--micro-batch-size``): one row per sample, right-padded, with a 2-D mask.

Either way `MicroBatch.spans` says where each sample sits, so log-probs are read from the
logits the same way. With top-p replay (``--rollout-top-p`` < 1) the micro-batch carries the
nuclei the engine sampled from, and log-probs are renormalised over them (entropy stays over
the whole vocabulary, as slime computes it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch

from slime_core.algorithms import entropy_from_logits, log_probs_from_logits, nucleus_keep_mask
from slime_core.algorithms.logprobs import triton_applies
from slime_core.rank.step import SampleLogits

_VARLEN_ATTENTION = ("flash_attention_2", "flash_attention_3", "slime_packed")  # boundaries from position ids


@dataclass
class MicroBatch:
    """Model inputs plus where each sample is inside them."""

    input_ids: torch.Tensor  # (rows, T) token ids
    position_ids: torch.Tensor  # (rows, T) restart at 0 for every sample; a VLM's: (3, rows, T) (`vision`)
    attention_mask: torch.Tensor | None  # (rows, T) padding mask, (1, 1, T, T) block-causal, or None
    spans: list[tuple[int, int, int, int]]  # per sample: (row, start, length, response_length)
    nuclei: tuple[list[list[int]], list[list[int]]] | None = None  # per sample: top-p nucleus ids, offsets
    sample_offsets: torch.Tensor | None = None  # packed, boundaries from position ids: (S + 1,) int32 starts, then T
    longest: int = 0  # with sample_offsets: the longest sample
    alone: bool = False  # one sample by `slime_core.algorithms.batch_invariant` (--true-on-policy-mode)
    extra: dict[str, torch.Tensor] = field(default_factory=dict)  # a VLM's pixel_values, image_grid_thw (`vision`)

    def model_inputs(self) -> dict[str, torch.Tensor | int | None]:
        """The model's keyword arguments; with ``sample_offsets``, transformers' flash-attention
        keywords too, so the attention reads the boundaries without waiting for the device."""
        model_inputs = {
            "input_ids": self.input_ids,
            "position_ids": self.position_ids,
            "attention_mask": self.attention_mask,
            **self.extra,
        }
        if self.sample_offsets is not None:
            model_inputs.update(
                cu_seq_lens_q=self.sample_offsets,
                cu_seq_lens_k=self.sample_offsets,
                max_length_q=self.longest,
                max_length_k=self.longest,
            )
        return model_inputs


def packed(
    tokens: list[list[int]], response_lengths: list[int], device, attn_implementation: str, nuclei=None
) -> MicroBatch:
    """All samples in one row (see the module docstring); ``nuclei``: `RolloutBatch.nuclei`."""
    lengths = [len(t) for t in tokens]
    offsets = [0, *itertools.accumulate(lengths)]
    input_ids = _to(torch.tensor([t for seq in tokens for t in seq])[None], device)
    position_ids = _to(torch.cat([torch.arange(n) for n in lengths])[None], device)
    spans = [(0, start, n, r) for start, n, r in zip(offsets, lengths, response_lengths)]
    if attn_implementation not in _VARLEN_ATTENTION:
        return MicroBatch(input_ids, position_ids, _block_causal_mask(lengths, device), spans, nuclei)
    return MicroBatch(
        input_ids,
        position_ids,
        None,
        spans,
        nuclei,
        _to(torch.tensor(offsets, dtype=torch.int32), device),
        max(lengths),
    )


def alone(tokens: list[int], response_length: int, device) -> MicroBatch:
    """One sample as the engines compute it in ``--true-on-policy-mode`` (`slime_core.algorithms.batch_invariant`)."""
    from slime_core.algorithms.batch_invariant import sequence_inputs

    model_inputs = sequence_inputs(tokens, device)
    spans = [(0, 0, len(tokens), response_length)]
    return MicroBatch(model_inputs["input_ids"], model_inputs["position_ids"], None, spans, alone=True)


def _to(tensor: torch.Tensor, device) -> torch.Tensor:
    """A CPU tensor on ``device`` without waiting for the device's queued work (the copy from
    pageable memory is staged before the call returns, so the source may go)."""
    return tensor.to(device, non_blocking=True)


def padded(tokens: list[list[int]], response_lengths: list[int], device, pad_token_id: int, nuclei=None) -> MicroBatch:
    """One right-padded row per sample; ``nuclei``: `RolloutBatch.nuclei`."""
    width = max(len(t) for t in tokens)
    input_ids = torch.full((len(tokens), width), pad_token_id)
    mask = torch.zeros((len(tokens), width), dtype=torch.long)
    for row, seq in enumerate(tokens):
        input_ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    position_ids = torch.arange(width, device=device).expand(len(tokens), width)
    spans = [(row, 0, len(seq), r) for row, (seq, r) in enumerate(zip(tokens, response_lengths))]
    return MicroBatch(_to(input_ids, device), position_ids, _to(mask, device), spans, nuclei)


def _block_causal_mask(lengths: list[int], device) -> torch.Tensor:
    """(1, 1, T, T) bool: position i attends to j iff j <= i and both are in the same sample."""
    segment = torch.repeat_interleave(torch.arange(len(lengths), device=device), torch.tensor(lengths, device=device))
    total = segment.numel()
    causal = torch.ones(total, total, dtype=torch.bool, device=device).tril()
    return (causal & (segment[:, None] == segment[None, :]))[None, None]


def response_slices(per_position: torch.Tensor, batch: MicroBatch) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per sample, the rows of ``per_position`` ((rows, T) values, say) that score its response
    tokens, as views, with those tokens.

    The output at position p predicts token p + 1, so a response occupying positions
    [start + n - r, start + n) is scored at [start + n - r - 1, start + n - 1).
    """
    out = []
    for row, start, length, response_length in batch.spans:
        first = start + length - response_length
        out.append((per_position[row, first - 1 : start + length - 1], batch.input_ids[row, first : start + length]))
    return out


def response_scores(logits: torch.Tensor, batch: MicroBatch) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Every response token's logits row, gathered with one index: ((N, V) scores, (N,) targets,
    per-sample counts). One gather keeps the backward to one scatter into the (rows, T, V)
    gradient; slicing sample by sample would allocate a full-size zero gradient per sample."""
    index = _response_positions(batch, logits.device)
    targets = batch.input_ids.reshape(-1)[index + 1]
    return logits.reshape(-1, logits.shape[-1])[index], targets, [r for *_, r in batch.spans]


def sample_logits(logits: torch.Tensor, batch: MicroBatch) -> SampleLogits:
    """Every sample's (length, V) logits and tokens, for a ``needs_logits`` loss: gathered with
    one index, as in `response_scores`, then split per sample."""
    width = batch.input_ids.shape[1]
    index = torch.cat(
        [torch.arange(row * width + start, row * width + start + length) for row, start, length, _ in batch.spans]
    )
    index = _to(index, logits.device)
    lengths = [length for _, _, length, _ in batch.spans]
    return SampleLogits(
        list(logits.reshape(-1, logits.shape[-1])[index].split(lengths)),
        list(batch.input_ids.reshape(-1)[index].split(lengths)),
    )


def response_log_probs(logits: torch.Tensor, batch: MicroBatch, temperature: float) -> list[torch.Tensor]:
    """Per sample, log π(y_t) of each response token: (response_len,) float32 tensors; with
    top-p replay, π renormalised over the token's nucleus."""
    if batch.alone:
        from slime_core.algorithms.batch_invariant import sequence_log_probs

        return [sequence_log_probs(logits, batch.input_ids, batch.spans[0][3], temperature)]
    if batch.nuclei is None and triton_applies(logits):
        return _log_probs_of_every_position(logits, batch, temperature)
    scores, targets, counts = response_scores(logits, batch)
    keep = None if batch.nuclei is None else nucleus_keep_mask(*batch.nuclei, targets, scores.shape[-1])
    return list(log_probs_from_logits(scores, targets, temperature, keep_mask=keep).split(counts))


def _log_probs_of_every_position(logits: torch.Tensor, batch: MicroBatch, temperature: float) -> list[torch.Tensor]:
    """`response_log_probs` where the Triton kernels run (CUDA): log-probs of every position's
    next token straight from the (rows·T, V) logits, then the response positions picked out
    of the (rows·T,) result. Gathering the response rows first would copy most of the logits
    and scatter their gradient back into zeros of the full size; the kernels' backward writes
    the full-size gradient once. (The last position's "next token" is a placeholder; it is
    never picked.)"""
    flat = logits.reshape(-1, logits.shape[-1])
    next_tokens = torch.nn.functional.pad(batch.input_ids.reshape(-1)[1:], (0, 1))
    every = log_probs_from_logits(flat, next_tokens, temperature)
    return list(every[_response_positions(batch, logits.device)].split([r for *_, r in batch.spans]))


def _response_positions(batch: MicroBatch, device) -> torch.Tensor:
    """(N,) flat positions into the (rows·T) outputs that score the response tokens, sample
    after sample (see `response_slices`)."""
    width = batch.input_ids.shape[1]
    positions = [
        torch.arange(row * width + start + length - r - 1, row * width + start + length - 1)
        for row, start, length, r in batch.spans
    ]
    return _to(torch.cat(positions), device)


def response_entropy(logits: torch.Tensor, batch: MicroBatch, temperature: float) -> list[torch.Tensor]:
    """Per sample, the entropy of π at each response token, over the whole vocabulary."""
    scores, _, counts = response_scores(logits, batch)
    return list(entropy_from_logits(scores, temperature).split(counts))
