"""slime's default rollout and evaluation as functions a user's rollout function calls
(``slime.rollout.sglang_rollout.generate_rollout`` / ``eval_rollout``), backed by ours.

slime's rollout functions often wrap its default: ``generate_rollout(args, rollout_id,
data_source)``, then change the samples. Here that call runs our default rollout function
(``--rollout-function default``: over-sampling, dynamic filter, partial rollout, hooks) on
the run's engines and rollout loop. It needs the rollout the adapter is calling (`RolloutCall`,
set by `slime_compat.rollout` around the user's function), so it works inside a
``--rollout-function-path`` / ``--eval-function-path`` function, from its own thread (a sync
function, as slime's are) or awaited in a thread by an async one.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import dataclasses
import functools
from typing import TYPE_CHECKING, Any

from slime_compat.outputs import RolloutFnEvalOutput, RolloutFnTrainOutput
from slime_compat.sample import fill_loss_mask, promote, promote_all

if TYPE_CHECKING:
    from slime_core.config.config import Config


@dataclasses.dataclass
class RolloutCall:
    """The rollout (or evaluation) during which slime-compat calls a user's function."""

    config: Any
    parts: Any  # slime_core.rollout.parts.RolloutParts
    loop: asyncio.AbstractEventLoop  # the rollout loop, where the engines' client lives
    datasets: dict = dataclasses.field(default_factory=dict)  # evaluation: name -> PromptDataset

    def run(self, coroutine, name: str):
        """Run ``coroutine`` on the rollout loop from the user's thread and wait for it."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            coroutine.close()
            raise RuntimeError(
                f"{name} blocks until the rollout is done, so an async rollout function cannot call "
                f"it directly; call it from a sync function, or `await asyncio.to_thread({name}, ...)`"
            )
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()


CURRENT: contextvars.ContextVar[RolloutCall] = contextvars.ContextVar("slime_compat_rollout_call")


def current(name: str) -> RolloutCall:
    """The `RolloutCall` in progress, or an error saying where ``name`` can be called."""
    call = CURRENT.get(None)
    if call is None:
        raise RuntimeError(
            f"slime-compat runs {name} on the run's engines, so it can only be called from a function "
            "that slime run calls with --rollout-function-path or --eval-function-path"
        )
    return call


@functools.lru_cache(maxsize=1)
def _default_rollout():
    from slime_core.plugins import Plugins

    return Plugins().registry("rollout_functions").get("default")


def generate_rollout(args, rollout_id, data_source, evaluation=False):
    """slime's default rollout: ``--rollout-batch-size`` accepted groups from ``data_source``
    as a `RolloutFnTrainOutput` (our default rollout function; the groups it aborts go back to
    the data source as ours do), or with ``evaluation`` the `eval_rollout` output."""
    call = current("generate_rollout")
    if evaluation:
        return call.run(eval_rollout(args, rollout_id), "generate_rollout")[0]
    source = getattr(data_source, "native", data_source)  # our source behind slime_compat.rollout.DataSourceView
    parts = dataclasses.replace(call.parts, data_source=source)
    result = call.run(_default_rollout()(rollout_id, call.config, parts), "generate_rollout")
    return RolloutFnTrainOutput(samples=fill_loss_mask(promote_all(result.groups)), metrics=result.metrics)


async def eval_rollout(args, rollout_id):
    """slime's default evaluation: every ``--eval-prompt-data`` prompt ``--n-samples-per-eval-prompt``
    times, generated and scored with slime's `generate_and_rm` (the custom generate and reward
    functions, else ours), as ``(RolloutFnEvalOutput, [])``."""
    from slime.rollout.sglang_rollout import GenerateState, generate_and_rm

    call = current("eval_rollout")
    if not call.datasets:
        raise RuntimeError(
            "eval_rollout evaluates the --eval-prompt-data datasets: call it from the function of "
            "--eval-function-path, which slime run calls when the run has evaluation datasets"
        )
    params = {**GenerateState(args).sampling_params, **_eval_sampling(call.config)}
    data = {}
    for name, dataset in call.datasets.items():
        samples = [
            _eval_copy(template, index)
            for index, template in enumerate(
                t for t in dataset.samples for _ in range(call.config.n_samples_per_eval_prompt)
            )
        ]
        done = await asyncio.gather(
            *(generate_and_rm(args, sample, dict(params), evaluation=True) for sample in samples)
        )
        flat = sorted(
            (one for result in done for one in (result if isinstance(result, list) else [result])),
            key=lambda sample: sample.index,
        )
        data[name] = {
            "rewards": [sample.get_reward_value(args) for sample in flat],
            "truncated": [sample.status == sample.Status.TRUNCATED for sample in flat],
            "samples": flat,
        }
    return RolloutFnEvalOutput(data=data), []


def _eval_copy(template, index: int):
    """A fresh copy of an evaluation prompt with slime's running index."""
    sample = promote(copy.deepcopy(template))
    sample.index = index
    return sample


def _eval_sampling(config: Config) -> dict:
    """The ``--eval-*`` sampling options that are set (the rollout's apply otherwise)."""
    pairs = {
        "temperature": "eval_temperature",
        "top_p": "eval_top_p",
        "top_k": "eval_top_k",
        "max_new_tokens": "eval_max_response_len",
    }
    return {key: config.get(option) for key, option in pairs.items() if config.get(option) is not None}
