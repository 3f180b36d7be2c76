"""slime.rollout.rm_hub: scoring with the custom reward function or our registered ones
(`slime_compat.rewards`)."""

from slime_compat.rewards import async_rm, batched_async_rm

__all__ = ["async_rm", "batched_async_rm"]
