"""``--sample-filter NAME ...``: take single samples out of the loss before training.

A sample filter is ``fn(sample, config) -> bool`` (True keeps the sample), registered with
``slime_register_sample_filters`` (slime-rewards registers ``drop_truncated`` and
``drop_over_length``); one marked with `over_rollout` judges the whole rollout at once
(``fn(groups, config) -> keep``, ``keep[g][i]`` for sample i of group g), for decisions that
compare samples across groups. A sample that some filter rejects stays in its group, so the group's
reward statistics (GRPO's mean and std) still count it, as in THUDM slime, but its loss mask
becomes all zeros: it contributes no gradient. The count is logged as
``rollout/samples_filtered``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slime_core.sample import Sample, SampleStatus

if TYPE_CHECKING:
    from slime_core.config import Config


def over_rollout(filter_fn: Callable) -> Callable:
    """Mark a sample filter that judges the whole rollout at once (see the module docstring)."""
    filter_fn.over_rollout = True
    return filter_fn


def _verdicts(filter_fn: Callable, groups: list[list[Sample]], config: Config) -> list[list[bool]]:
    """``keep[g][i]`` of one filter for sample i of group g."""
    if getattr(filter_fn, "over_rollout", False):
        return [list(map(bool, keep)) for keep in filter_fn(groups, config)]
    return [[not _trainable(sample) or bool(filter_fn(sample, config)) for sample in group] for group in groups]


def _trainable(sample: Sample) -> bool:
    """Whether filters judge the sample (failed and aborted ones are not trained on anyway)."""
    return sample.status not in (SampleStatus.FAILED, SampleStatus.ABORTED)


@dataclass
class SampleFilters:
    filters: list[tuple[str, Callable]]  # (name, fn(sample, config) -> bool)
    config: object

    @classmethod
    def from_config(cls, config: Config, plugins) -> SampleFilters:
        registry = plugins.registry("sample_filters")
        return cls([(name, registry.get(name)) for name in config.get("sample_filter") or []], config)

    def apply(self, groups: list[list[Sample]]) -> dict[str, float]:
        """Zero the loss mask of every trainable sample a filter rejects; the count as a metric
        (no metric when no filter is set)."""
        if not self.filters:
            return {}
        verdicts = [_verdicts(filter_fn, groups, self.config) for _, filter_fn in self.filters]
        rejected = 0
        for g, group in enumerate(groups):
            for i, sample in enumerate(group):
                if _trainable(sample) and not all(keep[g][i] for keep in verdicts):
                    sample.loss_mask = [0] * len(sample.loss_mask)
                    rejected += 1
        return {"rollout/samples_filtered": float(rejected)}
