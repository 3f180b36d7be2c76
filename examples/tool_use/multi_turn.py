"""The multi-turn tool-use generate function: the model may call the calculator mid-answer.

Each turn generates until the model closes a call (``</calc>``, a stop string) or stops by
itself. A call is answered by the calculator; its ``<result>...</result>`` tokens join the
sample as context with loss mask 0 (log-prob placeholders 0.0, which the losses ignore),
and the model goes on from there. The sample ends when the model answers without a call
(completed), or at ``--rollout-max-response-len`` response tokens or ``MAX_TOOL_CALLS``
calls (truncated). Tokens, loss mask, rollout log-probs, weight versions and status stay
consistent through ``Sample.append_response``, exactly as the default generate function
leaves them, so the train side consumes these samples like any other.

Select it with ``--generate-function examples.tool_use.multi_turn:generate``
(the repository root on ``PYTHONPATH``).
"""

from __future__ import annotations

import dataclasses
import uuid

from examples.tool_use.calculator import CALL_END, pending_call, tool_result
from slime_core.engine import SamplingParams, append_result
from slime_core.rollout.generate import sample_seed
from slime_core.rollout.parts import GenerateContext
from slime_core.sample import Sample, SampleStatus

MAX_TOOL_CALLS = 3


async def generate(sample: Sample, sampling: SamplingParams, ctx: GenerateContext) -> Sample:
    """Generate ``sample``'s response, calling the calculator when the model asks for it."""
    return await generate_with_tools(sample, sampling, ctx, MAX_TOOL_CALLS)


async def generate_with_tools(
    sample: Sample, sampling: SamplingParams, ctx: GenerateContext, max_tool_calls: int
) -> Sample:
    """`generate` with at most ``max_tool_calls`` calls (a partial sample continues where it stopped)."""
    if not sample.tokens:
        sample.tokens = list(ctx.tokenizer.encode(sample.prompt, add_special_tokens=False))
    stop = [CALL_END, *(sampling.stop or [])]
    while True:
        remaining = sampling.max_new_tokens - sample.response_length
        if remaining <= 0:
            sample.status = SampleStatus.TRUNCATED
            return sample
        turn = dataclasses.replace(
            sampling, max_new_tokens=remaining, stop=stop, sampling_seed=_turn_seed(sampling, sample, ctx)
        )
        rid = f"{sample.group_index}-{sample.index}-{uuid.uuid4().hex[:8]}"
        result = await ctx.engine.generate(sample.tokens, turn, return_logprob=True, rid=rid)
        # The engine's text leaves the stop string out; the response keeps the call as generated.
        append_result(sample, result, text=ctx.tokenizer.decode(result.output_ids, skip_special_tokens=True))
        expression = pending_call(sample.response) if sample.status == SampleStatus.COMPLETED else None
        if expression is None:
            return sample  # answered, truncated or aborted
        if sample.metadata.get("tool_calls", 0) >= max_tool_calls:
            sample.status = SampleStatus.TRUNCATED
            return sample
        _append_tool_result(sample, tool_result(expression), ctx.tokenizer)


def _turn_seed(sampling: SamplingParams, sample: Sample, ctx: GenerateContext) -> int | None:
    """The turn's sampling seed: the rollout's if it set one, else the default generate function's
    per-sample seed (`sample_seed`: from --rollout-seed, the sample and its response length so
    far), so a rerun with the same seed draws the same turns; none for a caller without a run config."""
    if sampling.sampling_seed is not None or ctx.config is None:
        return sampling.sampling_seed
    return sample_seed(ctx.config, sample)


def _append_tool_result(sample: Sample, text: str, tokenizer) -> None:
    """The tool's answer as context: loss mask 0, log-prob placeholders."""
    sample.append_response(tokenizer.encode(text, add_special_tokens=False), trainable=False, text=text)
    sample.metadata["tool_calls"] = sample.metadata.get("tool_calls", 0) + 1
    sample.status = SampleStatus.PENDING  # the model has not answered yet
