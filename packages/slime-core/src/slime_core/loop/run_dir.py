"""`RunDir`: the one directory a run writes into.

runs/20261122-171500/            (--output-dir, default a new timestamped folder)
  config.yaml                    the resolved config
  plugins.json                   the installed plugins with their versions
  placement.json                 the Ray node (id, IP) of each train rank, engine, the driver
                                 and the router (rewritten when an engine is replaced)
  metrics.jsonl                  one line per rollout (and one per evaluation)
  status.json                    running, then completed / failed (a fault: its message says
                                 which part) / interrupted (Ctrl-C, SIGTERM)
  slime.log                      what the console showed (with the start-up timeline)
  engines/engine_N.log           each engine's output (slime-sglang; on the engine's node)
  router/                        the router's logs (slime-router)
  rollouts/                      each rollout's samples, with --dump-rollouts
  checkpoints/                   when --save-interval is given without --save
  weights/                       the Hugging Face directories of --update-weight-transport disk
  tensorboard/, wandb/           with --use-tensorboard, --use-wandb (slime_core.loop.trackers)
  report/                        what `slime report` writes (slime_core.tools.report)
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slime_core.loop.trackers import Tracker, open_trackers

if TYPE_CHECKING:
    from slime_core.config import Config


class RunDir:
    """Paths of a run and the files it appends to; each metrics record also goes to the
    trackers (TensorBoard, W&B) that `create` opened and `close` finishes. ``config``: the
    run's config, which names this directory (see `create`)."""

    def __init__(self, path: str | Path, config: Config):
        self.path = Path(path)
        self.config = config
        self.path.mkdir(parents=True, exist_ok=True)
        self.trackers: list[Tracker] = []
        self.started = time.perf_counter()
        self._marked: set[str] = set()

    @classmethod
    def create(cls, config: Config, plugins) -> RunDir:
        """The run's directory (``--output-dir``, default a new ``runs/<timestamp>``) with its
        config and plugin list written. The run directory is a fact of the run, not of the
        options: its ``config`` is a copy of ``config`` (`Config.replace`) whose ``output_dir``
        names it and whose ``--save`` is ``<run>/checkpoints`` when ``--save-interval`` is given
        without it; the parts of the run read that one."""
        path = Path(config.output_dir or Path("runs") / time.strftime("%Y%m%d-%H%M%S"))
        save = str(path / "checkpoints") if config.save_interval and not config.save else config.save
        run = cls(path, config.replace(output_dir=str(path), save=save))
        config = run.config
        described = plugins.describe()
        (run.path / "config.yaml").write_text(config.to_yaml())
        (run.path / "plugins.json").write_text(json.dumps(described, indent=2) + "\n")
        run.trackers = open_trackers(config, described, run.path)
        run.write_status("running")
        return run

    def close(self, status: str) -> None:
        """Record how the run ended (completed, failed or interrupted) and finish the
        trackers; safe to call twice."""
        self.write_status(status)
        trackers, self.trackers = self.trackers, []
        for tracker in trackers:
            tracker.close(status)

    def write_status(self, status: str) -> None:
        """``status.json``: what `slime report` shows as the run's state."""
        (self.path / "status.json").write_text(json.dumps({"status": status, "time": round(time.time(), 3)}) + "\n")

    def write_placement(self, record: dict[str, Any]) -> None:
        """``placement.json``: on which node each part of the run is (`Placement.record`)."""
        (self.path / "placement.json").write_text(json.dumps(record, indent=2) + "\n")

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    def log_metrics(self, rollout_id: int, metrics: dict[str, Any]) -> None:
        """Append one line: the rollout id, the wall-clock time and every metric."""
        record = {"rollout_id": rollout_id, "time": round(time.time(), 3), **metrics}
        with self.metrics_file.open("a") as out:
            out.write(json.dumps(record) + "\n")
        for tracker in self.trackers:
            tracker.log(rollout_id, metrics)

    def dump_rollout(self, rollout_id: int, groups) -> Path:
        """``rollouts/rollout_NNNNNN.jsonl``: one sample per line (``Sample.to_dict``)."""
        path = self.path / "rollouts" / f"rollout_{rollout_id:06d}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(json.dumps(sample.to_dict()) + "\n" for group in groups for sample in group))
        return path

    def mark(self, event: str) -> None:
        """One line of the start-up timeline, the first time ``event`` happens: the seconds
        since the run directory was created (Ray up, ranks loaded, engines healthy, ...)."""
        if event not in self._marked:
            self._marked.add(event)
            self.log(f"start-up {time.perf_counter() - self.started:6.1f}s  {event}")

    def log(self, line: str) -> None:
        """Print a line and keep it in ``slime.log``."""
        print(line, flush=True)
        with (self.path / "slime.log").open("a") as out:
            out.write(line + "\n")

    def log_error(self, line: str) -> None:
        """Keep an error that ends the run in ``slime.log`` (the command prints it to stderr)."""
        with (self.path / "slime.log").open("a") as out:
            out.write(line + "\n")


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl``, of a finished or a running run: a last line that
    is still being written (no newline yet, not valid JSON) is left out; any other broken
    line is an error naming the file and line."""
    lines = Path(path).read_text().splitlines(keepends=True)
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if number == len(lines) and not line.endswith("\n"):
                break  # the run is writing it right now
            raise ValueError(f"{path}:{number}: not a JSON record ({exc.msg}); the file was edited or damaged") from exc
    return records
