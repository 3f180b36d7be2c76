"""``--rollout-function-path`` / ``--eval-function-path``: slime's whole-rollout functions
behind ours.

slime calls ``fn(args, rollout_id, data_source, evaluation=...)`` and takes a
``RolloutFnTrainOutput`` / ``RolloutFnEvalOutput`` or, from older functions, the bare
groups / eval dict. A sync function (slime's are, and often run their own event loop) runs
in a worker thread, an async one on our rollout loop; either may call slime's default
rollout (`slime_compat.default_rollout`). Returned samples whose loss mask was left None
(or empty) are trained on over their whole response, as in slime.
"""

from __future__ import annotations

import asyncio
import inspect
from statistics import mean
from typing import TYPE_CHECKING

from slime_compat.args import slime_args
from slime_compat.default_rollout import CURRENT, RolloutCall
from slime_compat.functions import load_function
from slime_compat.outputs import RolloutFnEvalOutput, RolloutFnTrainOutput
from slime_compat.sample import fill_loss_mask, promote_all
from slime_core.rollout.parts import without_engines
from slime_core.rollout.result import EvalResult, RolloutResult

if TYPE_CHECKING:
    from slime_core.config.config import Config


class DataSourceView:
    """Our data source as slime's functions use it: ``get_samples(n)`` / ``add_samples(groups)``
    with slime `Sample`s."""

    def __init__(self, data_source):
        self.native = data_source

    def get_samples(self, num_samples: int):
        return promote_all(self.native.get_samples(num_samples))

    def add_samples(self, samples) -> None:
        self.native.add_samples(samples)

    def __call__(self, num_samples: int):
        """``get_samples``: slime's default rollout hands its hooks the bound ``get_samples``."""
        return self.get_samples(num_samples)

    def __getattr__(self, name: str):
        return getattr(self.native, name)


async def _call_rollout(path: str, config: Config, parts, rollout_id, evaluation: bool, datasets=None):
    """The user's function, with the `RolloutCall` that slime's default rollout runs in."""
    fn = load_function(path)
    args = slime_args(config, parts.ctx.engine)
    call_args = (args, rollout_id, DataSourceView(parts.data_source))
    token = CURRENT.set(RolloutCall(config, parts, asyncio.get_running_loop(), datasets or {}))
    try:
        if inspect.iscoroutinefunction(fn):
            return await fn(*call_args, evaluation=evaluation)
        return await asyncio.to_thread(fn, *call_args, evaluation=evaluation)  # the thread sees CURRENT
    finally:
        CURRENT.reset(token)


async def rollout_function(rollout_id, config: Config, parts) -> RolloutResult:
    """Our rollout-function contract calling slime's; its groups go to training as they are."""
    output = await _call_rollout(config.rollout_function_path, config, parts, rollout_id, evaluation=False)
    if isinstance(output, tuple):  # slime's default rollout also returns the aborted groups
        output = output[0]
    if not isinstance(output, RolloutFnTrainOutput):
        output = RolloutFnTrainOutput(samples=output)
    return RolloutResult(groups=_groups(output.samples), metrics=dict(output.metrics or {}))


@without_engines
async def rollout_function_without_engines(rollout_id, config: Config, parts) -> RolloutResult:
    """`rollout_function` for slime's functions that call no engine (its SFT rollout): a run of
    it starts no engine and no router."""
    return await rollout_function(rollout_id, config, parts)


def _groups(samples) -> list[list]:
    """slime's samples as groups: already grouped, or a flat list split by ``group_index``."""
    if samples and not isinstance(samples[0], list):
        samples = _by_group(samples)
    return fill_loss_mask(promote_all([list(group) for group in samples]))


async def eval_function(config: Config, parts, datasets) -> EvalResult:
    """Our eval-function contract calling slime's: slime's eval function reads its datasets
    from ``args`` itself; its per-dataset rewards become ``eval/<name>`` (their mean, as slime
    logs them) and ``eval/<name>-truncated_ratio``, its metrics are added as they are, and the
    samples it returns each dataset's groups (for the eval log function)."""
    output = await _call_rollout(config.eval_function_path, config, parts, None, evaluation=True, datasets=datasets)
    if isinstance(output, tuple):
        output = output[0]
    if not isinstance(output, RolloutFnEvalOutput):
        output = RolloutFnEvalOutput(data=output)
    metrics = dict(output.metrics or {})
    for name, result in output.data.items():
        metrics[f"eval/{name}"] = mean(result["rewards"])
        if result.get("truncated"):
            metrics[f"eval/{name}-truncated_ratio"] = mean(map(float, result["truncated"]))
    groups = {name: _by_group(result["samples"]) for name, result in output.data.items() if result.get("samples")}
    return EvalResult(metrics, groups)


def _by_group(samples) -> list[list]:
    """A flat list of samples as one list per ``group_index``, in order of first appearance."""
    groups: dict = {}
    for sample in samples:
        groups.setdefault(sample.group_index, []).append(sample)
    return list(groups.values())
