"""Evaluation rollouts: every prompt of each ``--eval-prompt-data`` dataset, scored.

Each dataset gets ``--n-samples-per-eval-prompt`` responses per prompt, sampled with the
``--eval-*`` options (falling back to the rollout's), and reports its mean reward and
pass@k for k = 1 and k = n (the unbiased estimator 1 - C(n-c, k) / C(n, k) per prompt, with
c correct responses of n; a response counts as correct when its reward is positive).
"""

from __future__ import annotations

import asyncio
from math import comb
from typing import TYPE_CHECKING

from slime_core.data.prompt_dataset import PromptDataset
from slime_core.rollout.default import samples_in_flight, sampling_params
from slime_core.rollout.generate import generate_resilient
from slime_core.rollout.parts import RolloutParts
from slime_core.rollout.result import EvalResult
from slime_core.rollout.reward_hub import scalar_reward
from slime_core.sample import Sample, SampleStatus

if TYPE_CHECKING:
    from slime_core.config.config import Config


def pass_at_k(n: int, correct: int, k: int) -> float:
    """Probability that at least one of k responses drawn from n (``correct`` right) is right."""
    if n - correct < k:
        return 1.0
    return 1.0 - comb(n - correct, k) / comb(n, k)


async def evaluate(config: Config, parts: RolloutParts, datasets: dict[str, PromptDataset]) -> EvalResult:
    """``eval/<name>/reward_mean``, ``eval/<name>/pass@1`` and ``eval/<name>/pass@<n>``, with
    each dataset's scored groups (for ``slime_log_eval`` plugins)."""
    result = EvalResult({})
    for name, dataset in datasets.items():
        result.groups[name] = await _generate_all(config, parts, dataset)
        result.metrics.update(_dataset_metrics(name, result.groups[name], config.reward_key))
    return result


async def _generate_all(config: Config, parts: RolloutParts, dataset: PromptDataset) -> list[list[Sample]]:
    n = config.n_samples_per_eval_prompt
    sampling = sampling_params(config, evaluation=True)
    limit = asyncio.Semaphore(samples_in_flight(config, parts))
    groups = [[_copy(template, i, index) for index in range(n)] for i, template in enumerate(dataset.samples)]

    async def one(sample: Sample) -> None:
        async with limit:
            await generate_resilient(sample, sampling, parts.ctx, parts.generate)

    await asyncio.gather(*(one(sample) for group in groups for sample in group))
    await asyncio.gather(*(parts.reward_hub.score_group(group) for group in groups))
    return groups


def _copy(template: Sample, group_index: int, index: int) -> Sample:
    sample = Sample.from_dict(template.to_dict())
    sample.group_index, sample.index = group_index, index
    return sample


def _dataset_metrics(name: str, groups: list[list[Sample]], reward_key: str | None) -> dict[str, float]:
    rewards, pass1, pass_n = [], [], []
    for group in groups:
        scored = [scalar_reward(s, reward_key) for s in group if s.status != SampleStatus.FAILED]
        correct = sum(r > 0 for r in scored)
        rewards.extend(scored)
        pass1.append(pass_at_k(len(group), correct, 1))
        pass_n.append(pass_at_k(len(group), correct, len(group)))
    n = len(groups[0]) if groups else 0
    mean = lambda values: sum(values) / max(len(values), 1)  # noqa: E731
    return {
        f"eval/{name}/reward_mean": mean(rewards),
        f"eval/{name}/pass@1": mean(pass1),
        f"eval/{name}/pass@{n}": mean(pass_n),
    }
