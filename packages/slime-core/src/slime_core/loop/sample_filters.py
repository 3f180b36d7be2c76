"""``--sample-filter NAME ...``: take single samples out of the loss before training.

A sample filter is ``fn(sample, config) -> bool`` (True keeps the sample), registered with
``slime_register_sample_filters`` (slime-rewards registers ``drop_truncated`` and
``drop_over_length``). A sample that some filter rejects stays in its group, so the group's
reward statistics (GRPO's mean and std) still count it, as in THUDM slime, but its loss mask
becomes all zeros: it contributes no gradient. The count is logged as
``rollout/samples_filtered``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from slime_core.sample import Sample, SampleStatus


@dataclass
class SampleFilters:
    filters: list[tuple[str, Callable]]  # (name, fn(sample, config) -> bool)
    config: object

    @classmethod
    def from_config(cls, config, plugins) -> SampleFilters:
        registry = plugins.registry("sample_filters")
        return cls([(name, registry.get(name)) for name in config.get("sample_filter") or []], config)

    def apply(self, groups: list[list[Sample]]) -> dict[str, float]:
        """Zero the loss mask of every trainable sample a filter rejects; the count as a metric
        (no metric when no filter is set)."""
        if not self.filters:
            return {}
        rejected = 0
        for sample in (s for group in groups for s in group):
            if sample.status in (SampleStatus.FAILED, SampleStatus.ABORTED):
                continue
            if not all(keep(sample, self.config) for _, keep in self.filters):
                sample.loss_mask = [0] * len(sample.loss_mask)
                rejected += 1
        return {"rollout/samples_filtered": float(rejected)}
