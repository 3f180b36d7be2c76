"""Planning optimizer steps and micro-batches over a rank's share of a rollout.

Plans are lists of sample indices; the backends turn them into tensors. Two ways to cut a
step into micro-batches:

- fixed: ``--micro-batch-size`` samples each (padded to the longest by the backend);
- by token budget (``--use-dynamic-batch-size``): samples packed, without padding, into
  micro-batches of at most ``--max-tokens-per-gpu`` tokens (first-fit decreasing); or, for a
  backend that gives every sample a right-padded row of its own (Megatron without packed
  sequences), micro-batches whose rows × longest sample stay within the budget, so the
  budget bounds what the device holds there too.
"""

from __future__ import annotations


def step_slices(num_samples: int, num_steps: int) -> list[list[int]]:
    """Split ``range(num_samples)`` into ``num_steps`` contiguous, near-equal steps."""
    if num_samples < num_steps:
        raise ValueError(
            f"{num_samples} samples on this rank cannot make {num_steps} optimizer steps; "
            "lower --num-steps-per-rollout or raise --rollout-batch-size"
        )
    base, extra = divmod(num_samples, num_steps)
    bounds, start = [], 0
    for step in range(num_steps):
        end = start + base + (1 if step < extra else 0)
        bounds.append(list(range(start, end)))
        start = end
    return bounds


def fixed_micro_batches(indices: list[int], micro_batch_size: int) -> list[list[int]]:
    """``indices`` in runs of ``micro_batch_size``."""
    if micro_batch_size < 1:
        raise ValueError(f"--micro-batch-size must be at least 1, got {micro_batch_size}")
    return [indices[i : i + micro_batch_size] for i in range(0, len(indices), micro_batch_size)]


def token_budget_micro_batches(
    indices: list[int], lengths: list[int], max_tokens: int, padded_rows: bool = False
) -> list[list[int]]:
    """Pack samples into as few micro-batches of at most ``max_tokens`` tokens as first-fit
    decreasing finds; ``lengths[i]`` is sample ``i``'s token count. Each micro-batch keeps
    its samples in index order. ``padded_rows``: a micro-batch costs its sample count times
    its longest sample (one right-padded row per sample)."""
    too_long = [i for i in indices if lengths[i] > max_tokens]
    if too_long:
        longest = max(lengths[i] for i in too_long)
        raise ValueError(
            f"a sample of {longest} tokens does not fit in --max-tokens-per-gpu {max_tokens}; raise "
            "--max-tokens-per-gpu to at least the longest prompt + response, or lower --rollout-max-response-len"
        )
    bins: list[list[int]] = []
    loads: list[int] = []
    for i in sorted(indices, key=lambda i: -lengths[i]):
        # decreasing order: a bin's first sample is its longest, the width of its rows
        cost = (lambda b: lengths[bins[b][0]]) if padded_rows else (lambda b, i=i: lengths[i])
        target = next((b for b, load in enumerate(loads) if load + cost(b) <= max_tokens), None)
        if target is None:
            bins.append([])
            loads.append(0)
            target = len(bins) - 1
        bins[target].append(i)
        loads[target] += cost(target)
    return [sorted(b) for b in bins]
