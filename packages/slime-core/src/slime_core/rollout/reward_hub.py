"""Scoring samples with registered reward functions: concurrent, bounded, time-limited.

Reward functions are ``fn(sample, config) -> float | dict`` (or, with ``--group-rm``,
``fn(samples, config) -> list``), sync or async. Sync functions run in a thread pool of
``--rm-max-concurrency`` workers and async ones on the event loop, so a slow judge never
blocks generation; at most that many calls are in flight, and each has ``--rm-timeout``
seconds. A call that raises or times out does not stop the run: the sample records the
error (naming the function and its plugin) and is marked failed — excluded from
training — unless ``--rm-failure-reward`` gives it a default reward instead.

A reward that is not a finite number (NaN, ±inf) would turn the group's advantages, the loss
and then the weights into NaN: it stops the run with an error naming the function, the sample
(and its prompt's file:line) and the value, unless ``--drop-nonfinite-rewards`` marks such
samples failed instead (counted in ``reward/non_finite``; see ``slime_core.faults.nonfinite``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import numbers
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from slime_core.faults.nonfinite import NonFiniteError
from slime_core.sample import Sample, SampleStatus

if TYPE_CHECKING:
    from slime_core.config.config import Config

logger = logging.getLogger("slime.reward")


class RewardHub:
    """Scores samples and groups with the reward functions a config selects."""

    def __init__(self, config: Config, plugins):
        self.config = config
        self.registry = plugins.registry("reward_functions")
        self.timeout = config.rm_timeout
        self._executor = ThreadPoolExecutor(max_workers=config.rm_max_concurrency, thread_name_prefix="slime-reward")
        self._limit: asyncio.Semaphore | None = None
        self.counts = {"calls": 0, "failed": 0, "timed_out": 0, "non_finite": 0}

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def score_group(self, group: list[Sample]) -> None:
        """Fill ``reward`` of every sample of a group (one call per sample, or one per group)."""
        if self.config.group_rm:
            await self._score_together(group)
        else:
            await asyncio.gather(*(self.score_sample(sample) for sample in group))

    async def score_sample(self, sample: Sample) -> None:
        name = sample.metadata.get("rm_type") or self.config.rm_type
        try:
            reward = await self._call(name, sample)
        except Exception as exc:  # any failure of a user function is recorded, not raised
            self._record_failure([sample], name, exc)
            return
        self._accept(name, [sample], [reward])

    async def _score_together(self, group: list[Sample]) -> None:
        name = self.config.rm_type
        try:
            rewards = await self._call(name, group)
            if not isinstance(rewards, (list, tuple)) or len(rewards) != len(group):
                raise TypeError(
                    f"a group reward function must return one reward per sample ({len(group)}), got {rewards!r:.80}"
                )
        except Exception as exc:
            self._record_failure(group, name, exc)
            return
        self._accept(name, group, rewards)

    async def _call(self, name: str, target: Any) -> Any:
        if not name:
            raise ValueError("no reward function selected; set --rm-type (or metadata['rm_type'] per sample)")
        fn = self.registry.get(name)
        if self._limit is None:
            self._limit = asyncio.Semaphore(self.config.rm_max_concurrency)
        async with self._limit:
            self.counts["calls"] += 1
            if inspect.iscoroutinefunction(fn):
                call = fn(target, self.config)
            else:
                call = asyncio.get_running_loop().run_in_executor(self._executor, fn, target, self.config)
            return await asyncio.wait_for(call, self.timeout)

    def _accept(self, name: str, samples: list[Sample], rewards: list[Any]) -> None:
        """Give each sample its reward; a non-finite one raises `NonFiniteError`, or with
        ``--drop-nonfinite-rewards`` fails its sample (counted)."""
        for sample, reward in zip(samples, rewards):
            value = _trained_value(reward, self.config.reward_key)
            if value is None or math.isfinite(value):
                sample.reward = reward
                continue
            error = f"reward function '{name}'{self._provider(name)} returned {value} for {sample.describe()}"
            if not self.config.drop_nonfinite_rewards:
                raise NonFiniteError(
                    f"{error}: a non-finite reward cannot be trained on. Fix the function, or pass "
                    "--drop-nonfinite-rewards to drop such samples (counted in reward/non_finite)"
                )
            self.counts["non_finite"] += 1
            logger.warning("%s; dropped (--drop-nonfinite-rewards)", error)
            sample.error, sample.status, sample.reward = error, SampleStatus.FAILED, None

    def _record_failure(self, samples: list[Sample], name: str, exc: Exception) -> None:
        timed_out = isinstance(exc, asyncio.TimeoutError)
        what = f"timed out after {self.timeout}s (--rm-timeout)" if timed_out else f"raised {type(exc).__name__}: {exc}"
        error = f"reward function '{name}'{self._provider(name)} {what}"
        self.counts["timed_out" if timed_out else "failed"] += len(samples)
        more = f" and {len(samples) - 1} more of its group" if len(samples) > 1 else ""
        fallback = (
            "no reward: not trained on"
            if self.config.rm_failure_reward is None
            else f"reward {self.config.rm_failure_reward} (--rm-failure-reward)"
        )
        logger.warning("%s on %s%s; %s", error, samples[0].describe(), more, fallback)
        for sample in samples:
            sample.error = error
            if self.config.rm_failure_reward is None:
                sample.status, sample.reward = SampleStatus.FAILED, None
            else:
                sample.reward = self.config.rm_failure_reward

    def _provider(self, name: str) -> str:
        if name not in self.registry:
            return ""
        entry = self.registry.entry(name)
        return f" (plugin '{entry.plugin}', {entry.distribution})"

    def metrics(self) -> dict[str, int]:
        return {f"reward/{key}": value for key, value in self.counts.items()}


def _trained_value(reward: Any, reward_key: str | None) -> float | None:
    """The number a reward is trained as, where it is a number to check: the reward, or a
    dict reward's ``reward_key`` entry (None otherwise: `scalar_reward` says what is wrong)."""
    if isinstance(reward, dict):
        reward = reward.get(reward_key) if reward_key else None
    return float(reward) if isinstance(reward, numbers.Real) else None


def scalar_reward(sample: Sample, reward_key: str | None) -> float:
    """The number to train on: the reward itself, or ``reward[reward_key]`` for a dict reward."""
    reward = sample.reward
    if isinstance(reward, dict):
        if reward_key is None:
            raise ValueError(f"the reward is a dict with keys {sorted(reward)}; choose one with --reward-key")
        if reward_key not in reward:
            raise ValueError(f"--reward-key '{reward_key}' is not in the reward dict (keys: {sorted(reward)})")
        reward = reward[reward_key]
    if reward is None:
        raise ValueError(f"{sample.describe()} has no reward (status {sample.status.value})")
    reward = float(reward)
    if not math.isfinite(reward):  # set outside the reward hub (a rollout function, a hook)
        raise NonFiniteError(
            f"{sample.describe()} has the reward {reward}, which cannot be trained on: whatever set "
            "it (a rollout function, a hook) must give a finite number, or mark the sample failed"
        )
    return reward
