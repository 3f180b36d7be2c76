"""Running micro-batches through megatron's forward-backward schedule.

``get_forward_backward_func()`` picks plain gradient accumulation, 1F1B over pipeline
stages, or with virtual pipeline stages the interleaved 1F1B over model chunks; each calls
the model on each micro-batch and then a *loss function* on the output of the last stage,
whose ``(loss, result)`` answer it keeps. The loss is what the schedule backpropagates
(divided by the number of micro-batches); the results come back as a list, on the last
pipeline stage only, so `from_last_stage` hands them to every stage.

The interleaved schedule runs micro-batches in groups of one per pipeline stage, so it wants
their number to be a multiple of the pipeline size: `interleaving_count` says how many
micro-batches to run for a planned number (the rank adds empty ones, which change nothing).
"""

from __future__ import annotations

from contextlib import nullcontext
from functools import partial

import torch.distributed as dist


def run(model, micros: list, loss_fn, forward_only: bool, on_forward=None, around=None) -> list:
    """``micros`` (`slime_megatron.inputs.MicroBatch`) through ``model`` (`ModelChunks`); for
    each, the ``result`` of ``loss_fn(micro, logits) -> (loss, result)``, on every pipeline stage.
    ``on_forward()`` is called after each micro-batch's forward (a profiler's step); each forward
    runs inside the context manager ``around(micro)`` returns, if any (routing replay)."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    def forward_step(iterator, net):
        micro = next(iterator)
        with (around(micro) if around else None) or nullcontext():
            output = net(*micro.model_inputs(), None)
        if on_forward is not None:
            on_forward()
        return output, partial(loss_fn, micro)

    chunks = list(model)
    results = get_forward_backward_func()(
        forward_step_func=forward_step,
        data_iterator=[iter(micros) for _ in chunks] if len(chunks) > 1 else iter(micros),  # each chunk reads them all
        model=chunks,
        num_microbatches=len(micros),
        seq_length=max(m.input_ids.shape[1] for m in micros),
        micro_batch_size=max(m.input_ids.shape[0] for m in micros),
        forward_only=forward_only,
    )
    return from_last_stage(results)


def from_last_stage(results: list) -> list:
    """The last pipeline stage's ``results`` on every stage of its pipeline."""
    from megatron.core import parallel_state

    group = parallel_state.get_pipeline_model_parallel_group()
    if dist.get_world_size(group) == 1:
        return results
    box = [results]
    dist.broadcast_object_list(box, src=parallel_state.get_pipeline_model_parallel_last_rank(), group=group)
    return box[0]


def interleaving_count(count: int) -> int:
    """How many micro-batches to run for ``count`` planned ones: with virtual pipeline stages,
    a multiple of the pipeline size (megatron's interleaved schedule refuses others), else ``count``."""
    from megatron.core import parallel_state

    if parallel_state.get_virtual_pipeline_model_parallel_world_size() is None:
        return count
    stages = parallel_state.get_pipeline_model_parallel_world_size()
    return -(-count // stages) * stages
