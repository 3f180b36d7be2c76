"""Saving rollouts and replaying them into training (``--save-debug-rollout-data``,
``--load-debug-rollout-data``).

A saved rollout is one JSON file per rollout id: the accepted groups (every `Sample` field,
log-probs included; JSON keeps Python floats exactly) and the rollout's metrics. Replaying the
files of a run into a run with the same training options and seed gives the same training
metrics, step by step: a way to debug or profile training without engines, or to compare two
training setups on exactly the same data. ``--load-debug-rollout-data-subsample R`` replays only
a share R of each rollout's samples, as slime picks them: of the k = int(R × samples) kept, the
first k // 2 and the last k - k // 2 (at least one), in their groups.
"""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path

from slime_core.rollout.result import RolloutResult
from slime_core.sample import Sample


def rollout_path(template: str, rollout_id: int) -> Path:
    return Path(template.format(rollout_id=rollout_id))


def save_rollout(template: str, rollout_id: int, result: RolloutResult) -> Path:
    """Write rollout ``rollout_id`` to ``template`` with ``{rollout_id}`` filled in."""
    path = rollout_path(template, rollout_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "rollout_id": rollout_id,
        "metrics": result.metrics,
        "groups": [[sample.to_dict() for sample in group] for group in result.groups],
    }
    path.write_text(json.dumps(record))
    return path


def load_rollout(template: str, rollout_id: int, subsample: float | None = None) -> RolloutResult:
    path = rollout_path(template, rollout_id)
    if not path.is_file():
        raise FileNotFoundError(
            f"--load-debug-rollout-data: no saved rollout {rollout_id} at {path}; the saving run "
            "wrote one file per rollout it made (lower --num-rollout, or save more rollouts)"
        )
    record = json.loads(path.read_text())
    groups = [[Sample.from_dict(sample) for sample in group] for group in record["groups"]]
    return RolloutResult(subsampled(groups, subsample) if subsample else groups, record["metrics"])


def subsampled(groups: list[list[Sample]], share: float) -> list[list[Sample]]:
    """The first and last samples that make ``share`` of ``groups`` (the module docstring says
    which), each left in its group; groups left empty are dropped."""
    count = sum(len(group) for group in groups)
    kept = max(int(count * share), 1)
    chosen = set(range(kept // 2)) | set(range(count - (kept - kept // 2), count))
    out, position = [], 0
    for group in groups:
        part = [sample for offset, sample in enumerate(group) if position + offset in chosen]
        position += len(group)
        if part:
            out.append(part)
    return out


class ReplayedRollouts:
    """Stands in for the rollout manager in ``--debug-train-only``: each rollout is read from
    its file instead of being generated. There is no data source and nothing to evaluate."""

    eval_datasets: dict = {}

    def __init__(self, template: str, subsample: float | None = None):
        self.template, self.subsample = template, subsample

    def submit(self, rollout_id: int) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(load_rollout(self.template, rollout_id, self.subsample))
        except Exception as exc:  # noqa: BLE001 - delivered through the future, like a failed rollout
            future.set_exception(exc)
        return future

    def reward_metrics(self) -> dict[str, int]:
        """Replayed samples are scored already: no reward calls to count."""
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Nothing to restore: the files are addressed by rollout id."""

    def close(self) -> None:
        """Nothing to stop."""
