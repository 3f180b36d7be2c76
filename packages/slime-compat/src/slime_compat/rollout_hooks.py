"""``--rollout-sample-hook-path``, ``--rollout-sample-filter-path`` and
``--rollout-all-samples-process-path``: slime's per-rollout hooks behind ours.

- A sample hook is ``hook(args, sample, *, rollout_id=None, evaluation=False) -> Sample | None``
  (sync or async; only the keywords it names are passed), applied in the order given to each
  generated sample before its reward: our ``--sample-hook`` (``slime_core.hookspecs.slime_register_sample_hooks``).
- A rollout sample filter is ``fn(args, groups) -> None`` that sets ``sample.remove_sample``
  on the rollout's accepted groups: our over-rollout ``--sample-filter``
  (`slime_core.rollout.sample_filters.over_rollout`), so a removed sample keeps counting in its
  group's reward statistics and its loss mask becomes zeros, as in slime.
- An all-samples process is ``fn(args, all_groups, data_source) -> None`` with every group
  generated to the end, filtered-out ones included: our ``--all-groups-hook``.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from slime_compat.args import slime_args
from slime_compat.functions import call, load_function
from slime_compat.rollout import DataSourceView
from slime_compat.sample import Sample, promote, promote_all
from slime_core.rollout.sample_filters import over_rollout

if TYPE_CHECKING:
    from slime_core.config.config import Config


async def rollout_sample_hooks(sample, config: Config, rollout_id):
    """Our sample-hook contract calling each of slime's ``--rollout-sample-hook-path`` hooks."""
    args, sample = slime_args(config), promote(sample)
    for path in config.rollout_sample_hook_path:
        hook = load_function(path)
        result = await call(hook, args, sample, **_accepted(hook, rollout_id=rollout_id, evaluation=False))
        if result is not None and not isinstance(result, Sample):
            raise TypeError(
                f"--rollout-sample-hook-path {path} returned {type(result).__name__}; "
                "return the Sample, or None after changing it in place"
            )
        sample = sample if result is None else result
    return sample


def _accepted(fn, **kwargs) -> dict:
    """The keyword arguments ``fn`` names (all of them when it takes ``**kwargs``), as slime passes them."""
    parameters = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return kwargs
    names = {p.name for p in parameters}
    return {key: value for key, value in kwargs.items() if key in names}


@over_rollout
def rollout_sample_filter(groups, config: Config) -> list[list[bool]]:
    """Our over-rollout sample filter calling slime's; keeps what it did not mark ``remove_sample``."""
    promote_all(groups)
    in_order = sorted(groups, key=lambda group: min(sample.group_index for sample in group))
    load_function(config.rollout_sample_filter_path)(slime_args(config), in_order)
    return [[not sample.remove_sample for sample in group] for group in groups]


async def rollout_all_samples_process(rollout_id, groups, config: Config, data_source) -> None:
    """Our all-groups-hook contract calling slime's (the data source as slime's functions see it)."""
    fn = load_function(config.rollout_all_samples_process_path)
    await call(fn, slime_args(config), promote_all(groups), DataSourceView(data_source))
