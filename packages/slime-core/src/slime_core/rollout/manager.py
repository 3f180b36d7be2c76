"""`RolloutManager`: the rollout side of a run, as the loop sees it.

It owns the pieces a rollout function works with (`slime_core.rollout.parts.RolloutParts`:
data source, reward hub, generate function, group filter, the generation client and the
engines' controls) and one asyncio event loop in a background thread
(`slime_core.rollout.event_loop.EventLoopThread`), on which every rollout, evaluation and
engine control call runs. The driver stays plain synchronous code: ``submit`` returns a
future (asynchronous mode overlaps it with training), ``engine_control`` pauses, updates and
releases the engines on that loop (`slime_core.rollout.engine_control.EngineControl`), and
``run`` executes any other coroutine there (the weight check's probes).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from slime_core.rollout.engine_control import EngineControl
from slime_core.rollout.event_loop import EventLoopThread
from slime_core.rollout.parts import GenerateContext, RolloutParts
from slime_core.rollout.result import EvalResult, RolloutResult

if TYPE_CHECKING:
    from slime_core.config import Config

#: the metric with the seconds a rollout took to generate and score (in asynchronous mode,
#: ``time/wait_rollout`` is only the part that training did not hide)
ROLLOUT_SECONDS = "perf/rollout_seconds"


class RolloutManager:
    """Rollouts and evaluations. ``make_client`` (a coroutine function, run on the rollout
    loop) gives the generation client, and ``engines`` the engines' controls; both None for a
    rollout function that needs no engine (``sft``). ``tokenizer``: the model's (`slime_core.loop.parts`
    loads it while the engines start). ``engine_control``: the engines' control calls for the
    driver (None without engines)."""

    def __init__(
        self,
        config: Config,
        plugins,
        rollout_fn,
        make_client: Callable[[], Coroutine] | None = None,
        engines=None,
        *,
        tokenizer,
    ):
        from slime_core.rollout.reward_hub import RewardHub

        self.config, self.rollout_fn = config, rollout_fn
        self.tokenizer = tokenizer
        self._loop = EventLoopThread()
        self.engine_control = EngineControl(engines, self._loop) if engines is not None else None
        self.client = self.run(make_client()) if make_client else None
        registry = plugins.registry
        filter_name = config.dynamic_sampling_filter
        self.parts = RolloutParts(
            data_source=_data_source(config, plugins, self.tokenizer),
            reward_hub=RewardHub(config, plugins),
            generate=registry("generate_functions").get(config.generate_function) if engines is not None else None,
            group_filter=registry("group_filters").get(filter_name) if filter_name else None,
            ctx=GenerateContext(
                self.client, self.tokenizer, config, per_copy_seeds=bool(getattr(engines, "per_copy_seeds", False))
            ),
            engines=engines,
            sample_hooks=[registry("sample_hooks").get(name) for name in config.get("sample_hook") or []],
            all_groups_hooks=[registry("all_groups_hooks").get(name) for name in config.get("all_groups_hook") or []],
        )
        self.eval_datasets = _eval_datasets(config, self.tokenizer)
        self.eval_fn = registry("eval_functions").get(config.eval_function) if self.eval_datasets else None

    def run(self, coroutine: Coroutine) -> Any:
        """Run ``coroutine`` on the rollout loop and wait for its result."""
        return self._loop.run(coroutine)

    def submit(self, rollout_id: int) -> concurrent.futures.Future:
        """Start rollout ``rollout_id``; its `RolloutResult` arrives through the future."""
        return self._loop.submit(self._timed_rollout(rollout_id))

    def watch_engine_faults(self, engine_fault_handled: Callable[[], Awaitable[bool]]) -> None:
        """Let generation wait for the engine monitor after an engine failed a request
        (`GenerateContext.engine_fault_handled`; the driver gives its monitor's once started)."""
        self.parts.ctx.engine_fault_handled = engine_fault_handled

    async def _timed_rollout(self, rollout_id: int) -> RolloutResult:
        """The rollout function's result, with its duration as `ROLLOUT_SECONDS`."""
        start = time.perf_counter()
        result = await self.rollout_fn(rollout_id, self.config, self.parts)
        result.metrics[ROLLOUT_SECONDS] = time.perf_counter() - start
        return result

    def evaluate(self) -> EvalResult:
        """The ``eval/<name>/...`` metrics of every evaluation dataset (``--eval-prompt-data`` or
        ``--eval-config``; none if no dataset), with each dataset's groups when the eval function
        returns them."""
        if not self.eval_datasets:
            return EvalResult({})
        result = self.run(self.eval_fn(self.config, self.parts, self.eval_datasets))
        return result if isinstance(result, EvalResult) else EvalResult(result)

    def reward_metrics(self) -> dict[str, int]:
        """The reward hub's counts so far (calls, failed, timed out, non-finite), logged with
        every rollout whatever logs the rollout's own metrics."""
        return self.parts.reward_hub.metrics()

    def state_dict(self) -> dict[str, Any]:
        """The data source's position and buffer (saved with every checkpoint)."""
        return self.parts.data_source.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.parts.data_source.load_state_dict(state)

    def close(self) -> None:
        if self.client is not None:
            self.run(self.client.close())
        self._loop.close()


def _data_source(config: Config, plugins, tokenizer):
    source_class = plugins.registry("data_sources").get(config.data_source)
    buffer_filter = plugins.registry("buffer_filters").get(config.buffer_filter)
    return source_class.from_config(config, tokenizer, buffer_filter)


def _eval_datasets(config: Config, tokenizer) -> dict:
    """Each evaluation dataset's prompts (`slime_core.data.eval_datasets`), by name, with the
    dataset's reward and metadata overrides in every prompt's metadata."""
    from slime_core.data.eval_datasets import eval_datasets
    from slime_core.data.prompt_dataset import PromptDataset

    loaded = {}
    for spec in eval_datasets(config):
        dataset = PromptDataset.load(spec.path, spec.format, tokenizer)
        for sample in dataset.samples:
            sample.metadata.update(spec.metadata)
        loaded[spec.name] = dataset
    return loaded
