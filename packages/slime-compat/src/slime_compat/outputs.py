"""What slime's rollout, eval and filter functions return (slime's names and fields)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class RolloutFnTrainOutput:
    """A training rollout: the accepted groups and extra metrics."""

    samples: list  # list[list[Sample]], one inner list per prompt group
    metrics: dict[str, Any] | None = None


@dataclass
class RolloutFnEvalOutput:
    """An evaluation: per dataset name, ``{"rewards": [...], "truncated": [...], "samples": [...]}``."""

    data: dict[str, dict[str, Any]]
    metrics: dict[str, Any] | None = None


@dataclass
class DynamicFilterOutput:
    """A dynamic-sampling filter's verdict on one group."""

    keep: bool
    reason: str | None = None  # why it was dropped (counted per reason in slime's metrics)
    keep_when_insufficient: bool = False  # keep a rejected group when too few candidates are left


def should_drop_dynamic_filter_output(
    output: DynamicFilterOutput, *, remaining_batch_size: int, target_data_size: int
) -> bool:
    """slime's rule for a verdict: drop a rejected group, unless it asks to be kept when the
    groups still counted (``remaining_batch_size``) no longer exceed the ``target_data_size``."""
    if output.keep:
        return False
    return not (output.keep_when_insufficient and remaining_batch_size <= target_data_size)


def call_rollout_fn(fn, *args, evaluation: bool, **kwargs):
    """``fn(*args, evaluation=...)`` with a legacy bare result wrapped in the output type."""
    output = fn(*args, **kwargs, evaluation=evaluation)
    if not isinstance(output, (RolloutFnTrainOutput, RolloutFnEvalOutput)):
        output = RolloutFnEvalOutput(data=output) if evaluation else RolloutFnTrainOutput(samples=output)
    return output


def call_dynamic_filter(fn, *args, **kwargs) -> DynamicFilterOutput:
    """``fn(*args)`` as a `DynamicFilterOutput` (a legacy filter returns a bool); keep all without one."""
    if fn is None:
        return DynamicFilterOutput(keep=True)
    output = fn(*args, **kwargs)
    return output if isinstance(output, DynamicFilterOutput) else DynamicFilterOutput(keep=bool(output))
