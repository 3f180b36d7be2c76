"""``--dynamic-sampling-filter-path`` and ``--buffer-filter-path``: slime's filters behind ours.

A dynamic-sampling filter is ``fn(args, samples) -> DynamicFilterOutput`` (or a bool); ours
is ``fn(group, config, progress) -> bool``. ``keep_when_insufficient`` keeps a rejected group
when the groups accepted and in flight no longer fill the rollout, as slime does.

A buffer filter is ``fn(args, rollout_id, buffer, num_samples) -> groups`` and may pop from
the list it gets (it gets a copy; our buffer removes what it returns). Our buffer filters get
no config, so the adapter reads the run's config recorded by ``slime_before_run``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_compat.args import run_args, slime_args
from slime_compat.functions import load_function
from slime_compat.outputs import call_dynamic_filter
from slime_compat.sample import promote_all

if TYPE_CHECKING:
    from slime_core.config.config import Config


def dynamic_sampling_filter(group, config: Config, progress) -> bool:
    """Our group-filter contract calling slime's."""
    output = call_dynamic_filter(
        load_function(config.dynamic_sampling_filter_path), slime_args(config), promote_all(group)
    )
    if output.keep:
        return True
    return output.keep_when_insufficient and progress.accepted + progress.in_flight < progress.needed


def buffer_filter(groups, num_groups):
    """Our buffer-filter contract calling slime's (with no rollout id, as slime's data source)."""
    args = run_args()
    return load_function(args.buffer_filter_path)(args, None, promote_all(list(groups)), num_groups)
