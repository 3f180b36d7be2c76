"""``--custom-rm-path``: slime's reward function behind our reward hub.

slime awaits ``fn(args, sample)`` per sample, or, with ``--group-rm``, ``fn(args, samples)``
once per group; a sample's own ``custom_rm_path`` (slime's field, or ``metadata``) takes
priority over the flag, as in slime.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING

from slime_compat.args import config_of, slime_args
from slime_compat.functions import call, load_function
from slime_compat.sample import promote, promote_all

if TYPE_CHECKING:
    from slime_core.config.config import Config


async def custom_rm(target, config: Config):
    """Our reward-function contract (``fn(sample_or_group, config)``) calling slime's."""
    args = slime_args(config)
    if isinstance(target, list):
        return await call(load_function(config.custom_rm_path), args, promote_all(target))
    sample = promote(target)
    path = sample.custom_rm_path or sample.metadata.get("custom_rm_path") or config.custom_rm_path
    return await call(load_function(path), args, sample)


@functools.lru_cache(maxsize=1)
def _reward_functions():
    from slime_core.plugins import Plugins

    return Plugins().registry("reward_functions")


async def async_rm(args, sample, **kwargs):
    """slime's ``async_rm``: the sample's or the flag's custom function, else our registered
    reward function named by ``metadata["rm_type"]`` or ``--rm-type``."""
    path = promote(sample).custom_rm_path or args.custom_rm_path
    if path:
        return await call(load_function(path), args, sample, **kwargs)
    name = sample.metadata.get("rm_type") or args.rm_type
    return await call(_reward_functions().get(name), sample, config_of(args))


async def batched_async_rm(args, samples, **kwargs) -> list:
    """slime's ``batched_async_rm``: the flag's custom function on the whole list, else `async_rm` each."""
    if args.custom_rm_path:
        return await call(load_function(args.custom_rm_path), args, promote_all(samples), **kwargs)
    return list(await asyncio.gather(*(async_rm(args, sample, **kwargs) for sample in samples)))
