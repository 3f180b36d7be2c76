"""``--custom-eval-rollout-log-function-path``: slime's eval log function on our
``slime_log_eval`` hook.

slime calls ``fn(rollout_id, args, data, extra_metrics)`` after each evaluation, with ``data``
= {dataset name: {"rewards": [...], "truncated": [...], "samples": [...]}}, one entry per
generated sample (flat, in prompt order), and the eval function's own metrics; True skips its
default eval logging. Here True leaves out the eval function's metrics (``time/eval`` is
logged in any case).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_compat.args import slime_args
from slime_compat.functions import load_function
from slime_compat.sample import promote_all
from slime_core.rollout.reward_hub import scalar_reward
from slime_core.sample import SampleStatus

if TYPE_CHECKING:
    from slime_core.config.config import Config


def log_eval(rollout_id: int, config: Config, groups: dict, metrics: dict) -> bool:
    """Call slime's eval log function; whether it asks to skip the default metrics."""
    data = {name: _dataset_data(dataset_groups, config.reward_key) for name, dataset_groups in groups.items()}
    fn = load_function(config.custom_eval_rollout_log_function_path)
    return bool(fn(rollout_id, slime_args(config), data, metrics))


def _dataset_data(groups, reward_key: str | None) -> dict:
    """slime's per-dataset entry: scalar rewards, truncation flags and the slime Samples."""
    samples = promote_all([sample for group in groups for sample in group])
    return {
        "rewards": [scalar_reward(sample, reward_key) for sample in samples],
        "truncated": [sample.status == SampleStatus.TRUNCATED for sample in samples],
        "samples": samples,
    }
