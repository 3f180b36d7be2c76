"""`RunDir`: the one directory a run writes into.

    runs/20261122-171500/            (--output-dir, default a new timestamped folder)
      config.yaml                    the resolved config
      plugins.json                   the installed plugins with their versions
      metrics.jsonl                  one line per rollout (and one per evaluation)
      slime.log                      what the console showed
      rollouts/                      each rollout's samples, with --dump-rollouts
      checkpoints/                   when --save-interval is given without --save
      weights/                       the Hugging Face directories of --update-weight-transport disk
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class RunDir:
    """Paths of a run and the files it appends to."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    @classmethod
    def create(cls, config, plugins) -> RunDir:
        """The run's directory with its config and plugin list written; fills in ``--save``
        (``<run>/checkpoints``) when ``--save-interval`` is given without it."""
        run = cls(config.output_dir or Path("runs") / time.strftime("%Y%m%d-%H%M%S"))
        config.output_dir = str(run.path)
        if config.save_interval and not config.save:
            config.save = str(run.path / "checkpoints")
        (run.path / "config.yaml").write_text(config.to_yaml())
        (run.path / "plugins.json").write_text(json.dumps(plugins.describe(), indent=2) + "\n")
        return run

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    def log_metrics(self, rollout_id: int, metrics: dict[str, Any]) -> None:
        """Append one line: the rollout id, the wall-clock time and every metric."""
        record = {"rollout_id": rollout_id, "time": round(time.time(), 3), **metrics}
        with self.metrics_file.open("a") as out:
            out.write(json.dumps(record) + "\n")

    def dump_rollout(self, rollout_id: int, groups) -> Path:
        """``rollouts/rollout_NNNNNN.jsonl``: one sample per line (``Sample.to_dict``)."""
        path = self.path / "rollouts" / f"rollout_{rollout_id:06d}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(json.dumps(sample.to_dict()) + "\n" for group in groups for sample in group))
        return path

    def log(self, line: str) -> None:
        """Print a line and keep it in ``slime.log``."""
        print(line, flush=True)
        with (self.path / "slime.log").open("a") as out:
            out.write(line + "\n")


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (a finished or a running run)."""
    lines = Path(path).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]
