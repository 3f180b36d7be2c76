"""Evaluation rollouts: every prompt of each evaluation dataset, scored.

Each dataset (``--eval-prompt-data`` or ``--eval-config``, `slime_core.data.eval_datasets`)
gets its ``n_samples_per_eval_prompt`` responses per prompt (``--n-samples-per-eval-prompt``),
sampled with its own settings (falling back to the ``--eval-*`` options, then the rollout's); with
``--eval-max-context-len`` each response stops where prompt and response fill that many tokens.
It reports its mean reward (of ``--eval-reward-key``, else ``--reward-key``, for dict rewards)
and pass@k for k = 1 and k = n (the unbiased estimator
1 - C(n-c, k) / C(n, k) per prompt, with c correct responses of n; a response counts as correct
when its reward is positive); with ``--log-reward-category``, each category's share of samples.
"""

from __future__ import annotations

import asyncio
from math import comb
from typing import TYPE_CHECKING

from slime_core.data.eval_datasets import EvalDataset, eval_datasets, flag_eval_dataset
from slime_core.data.prompt_dataset import PromptDataset
from slime_core.engine import SamplingParams
from slime_core.rollout.default import samples_in_flight
from slime_core.rollout.generate import generate_resilient
from slime_core.rollout.metrics import category_shares
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
    """``eval/<name>/reward_mean``, ``eval/<name>/pass@1`` and ``eval/<name>/pass@<n>`` (and the
    reward categories' shares), with each dataset's scored groups (for ``slime_log_eval`` plugins)."""
    result = EvalResult({})
    specs = {spec.name: spec for spec in eval_datasets(config)}
    reward_key = config.get("eval_reward_key") or config.reward_key
    for name, dataset in datasets.items():
        spec = specs.get(name) or flag_eval_dataset(config, name, dataset.path)
        result.groups[name] = await _generate_all(config, parts, dataset, spec)
        result.metrics.update(_dataset_metrics(name, result.groups[name], reward_key))
        category = config.get("log_reward_category")
        if category:
            samples = [sample for group in result.groups[name] for sample in group]
            result.metrics.update(category_shares(samples, category, f"eval/{name}/error_cat/"))
    return result


async def _generate_all(config: Config, parts: RolloutParts, dataset: PromptDataset, spec: EvalDataset):
    limit = asyncio.Semaphore(samples_in_flight(config, parts))
    groups = [
        [_copy(template, i, index) for index in range(spec.n_samples)] for i, template in enumerate(dataset.samples)
    ]

    async def one(sample: Sample) -> None:
        async with limit:
            await generate_resilient(sample, eval_sampling(spec, len(sample.tokens)), parts.ctx, parts.generate)

    await asyncio.gather(*(one(sample) for group in groups for sample in group))
    await asyncio.gather(*(parts.reward_hub.score_group(group) for group in groups))
    return groups


def eval_sampling(spec: EvalDataset, prompt_tokens: int) -> SamplingParams:
    """A dataset's sampling for a prompt of ``prompt_tokens``: its response stops where prompt
    and response fill ``--eval-max-context-len``."""
    values = spec.sampling
    max_new_tokens = values["max_response_len"]
    if spec.max_context_len is not None:
        max_new_tokens = max(min(max_new_tokens, spec.max_context_len - prompt_tokens), 0)
    return SamplingParams(
        max_new_tokens=max_new_tokens,
        temperature=values["temperature"],
        top_p=values["top_p"],
        top_k=values["top_k"],
        stop=values["stop"],
        stop_token_ids=values["stop_token_ids"],
        min_new_tokens=values["min_new_tokens"],
    )


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
