"""The response tokens' log-probs and entropy of a Megatron rank, from the vocabulary-parallel
logits of its model chunks: in the training forward (the current policy's, `ResponseScorer`) and
in the forward-only passes before the update (`log_prob_pass`: π_old, the reference policy, the
distillation teacher).

Each rank scores the positions it holds: with tensor parallelism its slice of the vocabulary
(`slime_megatron.logprobs`), with context parallelism its two chunks of every row, whose
per-token values are assembled over the context-parallel group (`slime_megatron.context`), so
every context-parallel rank gets every position's value.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from slime_core.algorithms import nucleus_keep_mask
from slime_core.rank.step import SampleLogits
from slime_megatron import context, schedule
from slime_megatron.inputs import MicroBatch
from slime_megatron.logprobs import gather_vocab, vocab_parallel_entropy, vocab_parallel_log_probs


@dataclass(frozen=True)
class ResponseScorer:
    """How one rank turns a micro-batch's (B, W, V/tp) logits into per-sample values."""

    tp_group: dist.ProcessGroup  # the tensor-parallel group: the vocabulary is split over it
    vocab_size: int  # the Hugging Face model's vocabulary (Megatron pads it)
    cp_group: dist.ProcessGroup  # the context-parallel group: each row's positions are split over it
    cp_size: int

    def log_probs(self, logits: torch.Tensor, micro: MicroBatch, temperature: float, entropy: bool = False):
        """Per sample, log π of each response token (over its nucleus with top-p replay) at
        ``temperature`` and, with ``entropy``, the entropy of π (else None)."""
        positions, targets, counts = micro.response_positions()
        held, local = micro.held(positions)  # with context parallelism: the rank's (N_cp,) of them
        scores = logits.reshape(-1, logits.shape[-1])[local]  # (N_cp, V/tp)
        keep = None
        if micro.nuclei is not None:  # the nuclei's ids in this rank's slice of the vocabulary
            width = scores.shape[-1]
            start = dist.get_rank(self.tp_group) * width
            keep = nucleus_keep_mask(*micro.nuclei, targets, width, vocab_start=start)[held]
        log_probs = vocab_parallel_log_probs(scores, targets[held], temperature, self.tp_group, self.vocab_size, keep)
        log_probs = self.whole(log_probs, held).split(counts)
        if not entropy:
            return log_probs, None
        entropies = vocab_parallel_entropy(scores, temperature, self.tp_group, self.vocab_size)
        return log_probs, self.whole(entropies, held).split(counts)

    def whole(self, values: torch.Tensor, held: torch.Tensor) -> torch.Tensor:
        """The (N, ...) values of every scored position from this rank's ``held`` ones: assembled
        over the context-parallel group (`slime_megatron.context.assemble`), or ``values`` as they are."""
        return context.assemble(values, held, self.cp_group) if self.cp_size > 1 else values

    def sample_logits(self, logits: torch.Tensor, micro: MicroBatch) -> SampleLogits:
        """Per sample, the full-vocabulary logits of its real positions (gathered over the
        tensor-parallel group) and its tokens, for a ``needs_logits`` loss."""
        width = micro.input_ids.shape[1]
        index = torch.cat([torch.arange(row * width, row * width + n) for row, n in enumerate(micro.lengths)])
        index = index.to(logits.device)
        held, local = micro.held(index)
        rows = gather_vocab(logits.reshape(-1, logits.shape[-1])[local], self.tp_group, self.vocab_size)
        rows = self.whole(rows, held)
        return SampleLogits(
            list(rows.split(micro.lengths)), list(micro.input_ids.reshape(-1)[index].split(micro.lengths))
        )


def log_prob_pass(
    net, micros: list[MicroBatch], size: int, scorer: ResponseScorer, temperature: float, entropy: bool, **run
) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """A forward-only pass of the model chunks ``net`` over ``micros`` (the micro-batches of a
    batch of ``size`` samples) through the schedule (``run``: its ``on_forward`` and ``around``):
    per sample, in batch order, its response log-probs at ``temperature`` and, with ``entropy``,
    its per-token entropy (else None), as CPU tensors."""

    def collect(micro: MicroBatch, logits: torch.Tensor):
        """The schedule's loss function: no loss; the micro-batch's values."""
        if not micro.indices:
            return torch.zeros((), device=logits.device), ([], None)
        log_probs, entropies = scorer.log_probs(logits, micro, temperature, entropy)
        cpu = lambda values: [v.float().cpu() for v in values]  # noqa: E731
        return torch.zeros((), device=logits.device), (cpu(log_probs), None if entropies is None else cpu(entropies))

    results = schedule.run(net, micros, collect, forward_only=True, **run)
    out: list = [None] * size
    entropies: list = [None] * size
    for micro, (log_probs, micro_entropy) in zip(micros, results):
        for position, index in enumerate(micro.indices):
            out[index] = log_probs[position]
            entropies[index] = micro_entropy[position] if micro_entropy else None
    return out, entropies
