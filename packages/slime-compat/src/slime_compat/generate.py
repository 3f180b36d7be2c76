"""``--custom-generate-function-path``: slime's per-sample generate function behind ours.

slime awaits ``fn(args, sample, sampling_params)`` (plus ``evaluation=`` when the function
names it) and the function talks to the router at ``args.sglang_router_ip/port`` itself;
``sampling_params`` is the dict SGLang takes. A sample's own ``generate_function_path``
(slime's field, or ``metadata``) takes priority over the flag. A function may return a list
of samples (one trajectory split into several training samples): they take the sample's
place in its group. As in slime, a returned sample whose loss mask was left None (or empty)
is trained on over its whole response, and one marked ``remove_sample`` stays in its group's
reward statistics and is not trained on (its loss mask becomes zeros). A sample's images and
videos are trained on from its ``multimodal_inputs`` (slime's trainer takes the
``multimodal_train_inputs`` its function computed from them): a sample whose train inputs count
other images than it carries is an error (`check_train_pictures`).
"""

from __future__ import annotations

from slime_compat.args import slime_args
from slime_compat.functions import accepts, load_function
from slime_compat.sample import fill_loss_mask, promote
from slime_core.sample import Sample

#: what slime's ``sampling_params`` carry besides the rollout options: the text keeps special
#: tokens and stop strings, as the token ids do
SLIME_TEXT_OPTIONS = {"skip_special_tokens": False, "no_stop_trim": True, "spaces_between_special_tokens": False}


async def custom_generate(sample, sampling, ctx):
    """Our generate-function contract (``fn(sample, sampling, ctx) -> Sample``) calling slime's."""
    args = slime_args(ctx.config, ctx.engine)
    sample = promote(sample)
    path = (
        sample.generate_function_path
        or sample.metadata.get("generate_function_path")
        or ctx.config.custom_generate_function_path
    )
    fn = load_function(path)
    extra = {"evaluation": False} if accepts(fn, "evaluation") else {}
    result = await fn(args, sample, {**sampling.to_json(), **SLIME_TEXT_OPTIONS}, **extra)
    samples = result if isinstance(result, list) else [result]
    if not samples or not all(isinstance(one, Sample) for one in samples):
        raise TypeError(
            f"{path} returned {type(result).__name__}; return the Sample, or a non-empty list of "
            "Samples (one per training sample, as slime's multi-agent example does)"
        )
    for one in fill_loss_mask(samples):
        check_train_pictures(one, path)
        if getattr(one, "remove_sample", False):  # slime: in the group's statistics, not in the loss
            one.loss_mask = [0] * len(one.loss_mask)
    return result


def check_train_pictures(sample, path: str) -> None:
    """slime trains on a sample's ``multimodal_train_inputs`` (the processor's features of every
    image and video the model was shown); the trainers here compute them from the sample's
    ``multimodal_inputs``, so the two must name as many images (videos). ValueError otherwise."""
    given = getattr(sample, "multimodal_train_inputs", None) or {}
    for grid, kind in (("image_grid_thw", "images"), ("video_grid_thw", "videos")):
        if given.get(grid) is None:
            continue
        shown = len((sample.multimodal_inputs or {}).get(kind) or [])
        if len(given[grid]) != shown:
            raise ValueError(
                f"{path} returned {sample.describe()} with multimodal_train_inputs for {len(given[grid])} {kind} but "
                f"{shown} in multimodal_inputs['{kind}']; the trainer here computes their features from "
                f"multimodal_inputs: add each {kind[:-1]} shown in a later turn there too, in order (slime's geo3k "
                "rollout does)"
            )
