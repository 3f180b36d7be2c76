"""`RolloutResult`: what a rollout function returns to the loop."""

from __future__ import annotations

from dataclasses import dataclass, field

from slime_core.sample import Sample


@dataclass
class RolloutResult:
    """The accepted groups of one rollout and what it cost."""

    groups: list[list[Sample]]  # one inner list per prompt group, n_samples_per_prompt each
    metrics: dict[str, float] = field(default_factory=dict)  # "rollout/..." keys, logged as they are


@dataclass
class EvalResult:
    """What an eval function may return instead of its bare metrics: the metrics and the
    scored groups of each dataset, which ``slime_log_eval`` plugins read."""

    metrics: dict[str, float]  # "eval/<name>/..." keys, logged as they are
    groups: dict[str, list[list[Sample]]] = field(default_factory=dict)  # dataset name -> one list per prompt
