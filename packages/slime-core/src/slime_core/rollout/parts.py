"""What rollout and generate functions are handed: `GenerateContext` and `RolloutParts`.

A rollout function is ``async fn(rollout_id, config, parts: RolloutParts) -> RolloutResult``
(``slime_register_rollout_functions``); a generate function is ``async fn(sample, sampling,
ctx: GenerateContext) -> Sample`` (or a list of samples that take its place in the group;
``slime_register_generate_functions``). The loop builds
both once per run (`slime_core.rollout.manager.RolloutManager`).

A rollout function that generates nothing (``sft``, which completes samples with their
labels) is marked with `without_engines`, and a run of it starts no engine or router.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from slime_core.engine import RolloutEngine


async def no_engine_monitor() -> bool:
    """`GenerateContext.engine_fault_handled` where no engine monitor watches: nobody replaced an engine."""
    return False


@dataclass
class GenerateContext:
    """What a generate function may use."""

    engine: RolloutEngine | None  # generation through the router (or the engines in turn); None without engines
    tokenizer: Any  # Hugging Face tokenizer of the policy
    config: Any  # the run's Config
    # Whether the engines draw copy i of a request for n samples with parallel_sample_seed(seed, i)
    # (`slime_core.rollout_backend.Engines.per_copy_seeds`); otherwise a group request sends no seed.
    per_copy_seeds: bool = False
    # After a request failed with EngineUnavailable: waits for the engine monitor's check of every
    # engine, and says whether it replaced one meanwhile (`slime_core.loop.fault_tolerance.EngineMonitor`).
    engine_fault_handled: Callable[[], Awaitable[bool]] = no_engine_monitor


@dataclass
class RolloutParts:
    """The pieces a rollout function works with, looked up once by the loop."""

    data_source: Any  # slime_core.data.source.DataSource
    reward_hub: Any  # slime_core.rollout.reward_hub.RewardHub
    generate: Any | None  # async fn(sample, sampling, ctx) -> Sample; None without engines
    group_filter: Any | None  # fn(group, config, progress) -> bool, or None to keep every group
    ctx: GenerateContext
    engines: Any | None = (
        None  # slime_core.rollout_backend.Engines: count, abort, pause every engine; None without engines
    )
    sample_hooks: list = field(default_factory=list)  # fn(sample, config, rollout_id) -> Sample | None (--sample-hook)
    all_groups_hooks: list = field(
        default_factory=list
    )  # fn(rollout_id, groups, config, data_source) (--all-groups-hook)


def without_engines(rollout_fn: Callable) -> Callable:
    """Mark a rollout function that needs no engine: a run of it starts none (nor a router)."""
    rollout_fn.needs_engines = False
    return rollout_fn


def needs_engines(rollout_fn: Callable) -> bool:
    """Whether a run of ``rollout_fn`` needs rollout engines (True unless `without_engines`)."""
    return getattr(rollout_fn, "needs_engines", True)
