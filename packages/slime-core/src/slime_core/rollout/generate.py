"""The default per-sample generate function: one ``/generate`` call per sample.

A generate function is ``async fn(sample, sampling, ctx) -> Sample``: it extends the
sample's response (``Sample.append_response``, which keeps tokens, loss mask, log-probs and
weight versions consistent) and sets its status. ``ctx`` is a `GenerateContext`. It may
return a list of samples instead (one trajectory split into several training samples, e.g.
one per agent): they take the sample's place in its group (`produced_samples`). Plugins
register their own (``slime_register_generate_functions``), e.g. a multi-turn tool loop
that appends tool output with ``trainable=False``.

With the default generate function, the rollout sends a fresh group as one request for all
its samples (`generate_group`, ``--rollout-group-requests``, on by default); partial groups
and other generate functions go sample by sample.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import uuid
import zlib
from typing import TYPE_CHECKING

from slime_core.engine import EngineUnavailable, SamplingParams, append_result, parallel_sample_seed
from slime_core.multimodal.images import image_data
from slime_core.multimodal.videos import video_data
from slime_core.rollout.parts import GenerateContext
from slime_core.sample import Sample, SampleStatus

if TYPE_CHECKING:
    from slime_core.config.config import Config

log = logging.getLogger(__name__)


async def generate_sample(sample: Sample, sampling: SamplingParams, ctx: GenerateContext) -> Sample:
    """Continue ``sample`` (a fresh prompt or a partial response) up to the response limit."""
    if not sample.tokens:
        sample.tokens = list(ctx.tokenizer.encode(sample.prompt, add_special_tokens=False))
    remaining = sampling.max_new_tokens - sample.response_length
    if remaining <= 0:
        sample.status = SampleStatus.TRUNCATED
        return sample
    request = dataclasses.replace(
        sampling,
        max_new_tokens=remaining,
        sampling_seed=sampling.sampling_seed if sampling.sampling_seed is not None else sample_seed(ctx.config, sample),
    )
    rid = f"{sample.group_index}-{sample.index}-{uuid.uuid4().hex[:8]}"
    media = {**image_data(sample), **video_data(sample)}
    result = await ctx.engine.generate(sample.tokens, request, return_logprob=True, rid=rid, **media)
    append_result(sample, result)
    return sample


async def generate_group(group: list[Sample], sampling: SamplingParams, ctx: GenerateContext) -> list[Sample]:
    """Generate a fresh group (samples 0..n-1 of one prompt, no response yet) as ONE request
    for n samples (``sampling_params.n``, SGLang's parallel sampling): the prompt is sent and
    prefilled once, and the driver, the router and the engine handle one request instead of n
    (a 256-sample rollout of the quickstart: 0.36 -> 0.16 s alone, the driver's CPU 0.15 -> 0.02 s).

    Sample i is drawn with the seed it would get alone (`sample_seed`), so grouped and
    per-sample requests give the same tokens. A real SGLang server gives every copy of a
    request the same seed (identical samples under ``--enable-deterministic-inference``), so
    the seed is sent only to engines that seed each copy (``parallel_sample_seed``), which their
    rollout backend declares (``GenerateContext.per_copy_seeds``; the CPU engine does)."""
    first = group[0]
    prompt = list(first.tokens or ctx.tokenizer.encode(first.prompt, add_special_tokens=False))
    seed = sampling.sampling_seed if sampling.sampling_seed is not None else group_seed(ctx.config, first)
    request = dataclasses.replace(sampling, sampling_seed=seed if ctx.per_copy_seeds else None)
    media = {**image_data(first), **video_data(first)}
    results = await ctx.engine.generate_parallel(prompt, request, len(group), return_logprob=True, **media)
    for sample, result in zip(group, results):
        sample.tokens = list(prompt)
        append_result(sample, result)
    return group


def sample_seed(config: Config, sample: Sample) -> int:
    """The sampling seed of one request: from ``--rollout-seed``, the sample's group and index
    and how much of its response exists. A rerun (or a run resumed from a checkpoint) draws
    the same tokens for the same prompts, on any engine that honours seeds, however requests
    are batched, and whether the group goes as one request (`generate_group`) or not."""
    return parallel_sample_seed(group_seed(config, sample), sample.index)


def group_seed(config: Config, sample: Sample) -> int:
    """The seed shared by the samples of ``sample``'s group at its response length."""
    key = f"{config.rollout_seed}:{sample.group_index}:{sample.response_length}"
    return zlib.crc32(key.encode()) & 0x7FFFFFFF


async def generate_resilient(sample: Sample, sampling: SamplingParams, ctx: GenerateContext, generate) -> int:
    """``generate(sample, sampling, ctx)``; with ``--use-fault-tolerance``, a failure of the
    engine (`EngineUnavailable`: it died or hung mid-request) puts the sample back as it was and
    generates it again: at once when the fault-tolerance monitor replaced an engine meanwhile
    (not counted), otherwise up to ``--generate-max-retries`` times, waiting 1, 2, 4 … 10 s in
    between (`_retried`). Returns how many times the sample was generated again.

    The sample's sampling seed depends only on the sample (`sample_seed`), so a regenerated
    sample is drawn exactly as the lost one would have been on the same weights."""
    return await _retried([sample], lambda: generate(sample, sampling, ctx), ctx)


async def generate_produced(
    sample: Sample, sampling: SamplingParams, ctx: GenerateContext, generate
) -> tuple[list[Sample], int]:
    """`generate_resilient`, also returning the samples the generate function made of
    ``sample`` (`produced_samples`)."""
    produced: list[Sample] = []

    async def once(sample, sampling, ctx):
        produced[:] = produced_samples(await generate(sample, sampling, ctx), sample, generate)

    return produced, await generate_resilient(sample, sampling, ctx, once)


def produced_samples(result, sample: Sample, generate) -> list[Sample]:
    """What a generate function returned for ``sample``, as the list that takes its place in
    the group: the sample (returned, or None from a function that works in place), another
    sample, or a list of samples. Samples without a group or index get ``sample``'s."""
    samples = [sample] if result is None else result if isinstance(result, list) else [result]
    if not samples or not all(isinstance(one, Sample) for one in samples):
        got = (
            type(result).__name__
            if not isinstance(result, list)
            else f"a list of {[type(one).__name__ for one in samples]}"
        )
        raise TypeError(
            f"generate function {getattr(generate, '__qualname__', generate)} returned {got}; "
            "return the Sample, or a non-empty list of Samples (one per training sample)"
        )
    for one in samples:
        one.group_index = sample.group_index if one.group_index is None else one.group_index
        one.index = sample.index if one.index is None else one.index
    return samples


async def generate_group_resilient(group: list[Sample], sampling: SamplingParams, ctx: GenerateContext) -> int:
    """`generate_group` with `generate_resilient`'s retries: a lost request is the whole group
    again. Returns how many samples were generated again."""
    return len(group) * await _retried(group, lambda: generate_group(group, sampling, ctx), ctx)


async def _retried(samples: list[Sample], attempt, ctx: GenerateContext) -> int:
    """Await ``attempt()``; on `EngineUnavailable` (with fault tolerance) restore ``samples``
    as they were and try again, as `generate_resilient` says. A failure that an engine's
    replacement explains (``ctx.engine_fault_handled``: the sample waits for the fault-tolerance
    monitor's check and replacement) is tried again at once and counts against none of
    ``--generate-max-retries``, so a lost node cannot use them up; the others count, tried again
    after 1, 2, 4 … 10 s. Without fault tolerance the failure is raised once the engine monitor
    has checked the engines, so that a failed engine stops the run under its own name and
    error rather than the router's. Returns how many times the samples were generated again."""
    config = ctx.config
    fault_tolerant = bool(config.get("use_fault_tolerance"))
    before = copy.deepcopy(samples) if fault_tolerant else None
    again = counted = 0
    while True:
        try:
            await attempt()
            return again
        except EngineUnavailable as exc:
            replaced = await ctx.engine_fault_handled()  # without fault tolerance: a failed engine stops the run
            if not fault_tolerant:
                raise
            if not replaced:
                if counted == config.generate_max_retries:
                    raise
                counted += 1
            again += 1
            why = "an engine was replaced" if replaced else f"retry {counted} of {config.generate_max_retries}"
            log.info(
                "samples %s: %s; generating again (%s)",
                ", ".join(f"{s.group_index}-{s.index}" for s in samples),
                exc,
                why,
            )
            for sample, saved in zip(samples, copy.deepcopy(before)):
                sample.__dict__.update(saved.__dict__)
            if not replaced:
                await asyncio.sleep(min(2.0 ** (counted - 1), 10.0))
