"""``--custom-generate-function-path``: slime's per-sample generate function behind ours.

slime awaits ``fn(args, sample, sampling_params)`` (plus ``evaluation=`` when the function
names it) and the function talks to the router at ``args.sglang_router_ip/port`` itself;
``sampling_params`` is the dict SGLang takes. A sample's own ``generate_function_path``
(slime's field, or ``metadata``) takes priority over the flag.
"""

from __future__ import annotations

from slime_core.sample import Sample

from slime_compat.args import slime_args
from slime_compat.functions import accepts, load_function
from slime_compat.sample import promote


async def custom_generate(sample, sampling, ctx):
    """Our generate-function contract (``fn(sample, sampling, ctx) -> Sample``) calling slime's."""
    args = slime_args(ctx.config, ctx.engine)
    sample = promote(sample)
    path = sample.generate_function_path or sample.metadata.get("generate_function_path") \
        or ctx.config.custom_generate_function_path
    fn = load_function(path)
    extra = {"evaluation": False} if accepts(fn, "evaluation") else {}
    result = await fn(args, sample, sampling.to_json(), **extra)
    if not isinstance(result, Sample):
        raise TypeError(f"{path} returned {type(result).__name__}; slime-compat trains one Sample per generate call "
                        "(a list of samples per prompt is not supported yet): return the sample")
    return result
