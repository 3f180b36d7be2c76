"""Trackers: where each ``metrics.jsonl`` record goes besides the file.

``--use-tensorboard`` writes every numeric metric as a TensorBoard scalar to
``<output-dir>/tensorboard`` (step = rollout id, so the eval before training sits at -1);
``--use-wandb`` sends them to Weights & Biases with the resolved config and the installed
plugins. Both libraries are optional extras: a missing one is reported before anything
starts, with the command that installs it.
"""

from __future__ import annotations

import importlib.util
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from slime_core.config import Config

#: tracker flag -> (module it needs, the extra of slime-core that installs it)
LIBRARIES = {
    "use_tensorboard": ("tensorboardX", "tensorboard"),
    "use_wandb": ("wandb", "wandb"),
}


class Tracker(Protocol):
    def log(self, rollout_id: int, metrics: dict[str, float]) -> None:
        """Record one rollout's numeric metrics."""

    def close(self, status: str) -> None:
        """Flush and finish; ``status`` is the run's end: completed, failed or interrupted."""


def tracker_problems(config: Config) -> list[str]:
    """One line per tracker that was asked for but whose library is not installed."""
    problems = []
    for flag, (module, extra) in LIBRARIES.items():
        if config.get(flag) and importlib.util.find_spec(module) is None:
            problems.append(
                f"--{flag.replace('_', '-')} needs the '{module}' package, which is not installed; "
                f'install it with: pip install "slime-core[{extra}]"'
            )
    return problems


class TrackerError(RuntimeError):
    """A tracker that cannot start; the message says which and how to fix it."""


def open_trackers(config: Config, described: list[dict[str, Any]], run_path: Path) -> list[Tracker]:
    """The trackers the config asks for, started; ``described`` is ``Plugins.describe()``."""
    problems = tracker_problems(config)
    if problems:
        raise TrackerError("\n".join(problems))
    trackers: list[Tracker] = []
    try:
        if config.get("use_tensorboard"):
            trackers.append(TensorBoardTracker(run_path / "tensorboard"))
        if config.get("use_wandb"):
            trackers.append(WandbTracker(config, described, run_path))
    except BaseException:
        for tracker in trackers:  # the ones that did start
            tracker.close("failed")
        raise
    return trackers


def numeric(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numbers among ``metrics`` (strings, lists and NaN are left out)."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, (int, float)) and math.isfinite(value):
            out[key] = float(value)
    return out


class TensorBoardTracker:
    """Scalars in a TensorBoard event file, written with tensorboardX's event writer (no
    TensorFlow, no TensorBoard server) synchronously: each rollout is on disk once `log`
    returns, so a running run shows up to its last rollout. (tensorboardX's SummaryWriter
    queues events for a background thread that its ``flush`` does not wait for.)"""

    def __init__(self, logdir: Path):
        from tensorboardX.event_file_writer import EventsWriter

        logdir.mkdir(parents=True, exist_ok=True)
        self.events = EventsWriter(str(logdir / "events"))

    def log(self, rollout_id: int, metrics: dict[str, float]) -> None:
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.summary import scalar

        now = time.time()
        for key, value in numeric(metrics).items():
            self.events.write_event(Event(wall_time=now, step=rollout_id, summary=scalar(key, value)))
        self.events.flush()

    def close(self, status: str) -> None:
        self.events.close()


class WandbTracker:
    """A Weights & Biases run whose config is the resolved slime config plus the installed
    plugins (``slime_plugins``: name -> distribution and version). Every metric is plotted
    against ``rollout_id``, which is logged as a metric of its own because W&B's internal
    step cannot start at -1 (the eval before training)."""

    def __init__(self, config: Config, described: list[dict[str, Any]], run_path: Path):
        import wandb

        directory = Path(config.wandb_dir or run_path)
        directory.mkdir(parents=True, exist_ok=True)
        plugins = {p["name"]: {"distribution": p["distribution"], "version": p["version"]} for p in described}
        try:
            self.run = wandb.init(
                project=config.wandb_project,
                group=config.wandb_group,
                name=config.wandb_run_name or run_path.name,
                mode=config.wandb_mode,
                dir=str(directory),
                config={**config.to_dict(), "slime_plugins": plugins},
            )
        except wandb.errors.UsageError as exc:  # no API key for an online run, mostly
            raise TrackerError(
                f"--use-wandb could not start a W&B run: {exc}\n"
                "log in (`wandb login` or WANDB_API_KEY), or pass --wandb-mode offline "
                "and upload later with `wandb sync`"
            ) from exc
        self.run.define_metric("rollout_id")
        self.run.define_metric("*", step_metric="rollout_id")

    def log(self, rollout_id: int, metrics: dict[str, float]) -> None:
        self.run.log({**numeric(metrics), "rollout_id": rollout_id})

    def close(self, status: str) -> None:
        """Finish the run and wait until W&B's service has written all of it to disk
        (``finish`` alone returns before the offline run file is complete)."""
        import wandb

        self.run.finish(exit_code=0 if status == "completed" else 1)
        wandb.teardown()
