"""``--custom-rollout-log-function-path``: slime's rollout log function on our
``slime_log_rollout`` hook.

slime calls ``fn(rollout_id, args, samples, rollout_extra_metrics, rollout_time)`` once per
rollout, before its default logging, with the rollout's samples as one flat list, the rollout
function's own metrics and the seconds the rollout took; True skips the default logging. Here
True leaves out the rollout's default metrics (the rollout function's and the samples'
statistics); the loop's counters, timings and train metrics are logged in any case, as slime
logs its train metrics apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_compat.args import slime_args
from slime_compat.functions import load_function
from slime_compat.sample import promote_all

if TYPE_CHECKING:
    from slime_core.config.config import Config


def log_rollout(rollout_id: int, config: Config, groups, metrics: dict, seconds: float) -> bool:
    """Call slime's rollout log function; whether it asks to skip the default metrics."""
    samples = promote_all([sample for group in groups for sample in group])
    fn = load_function(config.custom_rollout_log_function_path)
    return bool(fn(rollout_id, slime_args(config), samples, metrics, seconds))
