"""slime.rollout.data_source: slime's data-source classes and ``pop_first`` (see `slime_compat.prompt_sources`)."""

from slime_compat.prompt_sources import DataSource, RolloutDataSource, RolloutDataSourceWithBuffer, pop_first

__all__ = ["DataSource", "RolloutDataSource", "RolloutDataSourceWithBuffer", "pop_first"]
