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
    """Our reward-function contract (``fn(sample_or_group, config)``) calling slime's; what it
    raises is re-raised naming the function (and the server at ``--rm-url`` it could not reach)."""
    args = slime_args(config)
    if isinstance(target, list):
        path, given = config.custom_rm_path, promote_all(target)
    else:
        given = promote(target)
        path = given.custom_rm_path or given.metadata.get("custom_rm_path") or config.custom_rm_path
    try:
        return await call(load_function(path), args, given)
    except Exception as exc:
        what = f"--custom-rm-path {path} raised {type(exc).__name__}: {exc}"
        raise RewardFunctionError(what + _server(exc, config)) from exc


class RewardFunctionError(RuntimeError):
    """A slime reward function failed; the message names it."""


def _server(exc: Exception, config: Config) -> str:
    """For a failed HTTP request of a run with ``--rm-url``: which server it was meant for."""
    import aiohttp

    url = config.get("rm_url")
    if not url or not isinstance(exc, aiohttp.ClientError):
        return ""
    return f" (the server at --rm-url {url}: is it running and answering there?)"


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
