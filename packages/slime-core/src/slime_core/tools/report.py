"""`slime report RUN_DIR`: PNG plots of a run's main curves and a short Markdown summary.

Reads only the run directory (``metrics.jsonl``, ``config.yaml``, ``status.json``), so it
works on a finished run and on one that is still going (a half-written last line is left
out). Metric families the run did not log (no eval, no KL loss, ...) are skipped.

    report/                      (--out, default <run>/report)
      report.md                  status, progress, eval, reward trend, step time, tokens/s
      reward.png eval.png kl.png response_length.png step_time.png
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from slime_core.loop.run_dir import read_metrics

#: Every PNG is this many pixels (width, height): FIGURE_INCHES x DPI.
FIGURE_INCHES, DPI = (9, 4), 100
PIXELS = (FIGURE_INCHES[0] * DPI, FIGURE_INCHES[1] * DPI)

Record = dict[str, Any]
Series = dict[str, tuple[list[float], list[float]]]  # label -> (rollout ids, values)


class ReportError(ValueError):
    """A folder that cannot be reported on; the message says why and what to pass instead."""


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the plots and ``report.md`` into ``out`` (default ``<run_dir>/report``); return
    the path of ``report.md``."""
    run = Path(run_dir)
    records = _load_records(run)
    out = Path(out) if out else run / "report"
    out.mkdir(parents=True, exist_ok=True)
    pyplot = _pyplot()
    plots = [name for name, panels in _figures(records) if _save_figure(pyplot, out / name, panels)]
    plots += ["step_time.png"] if _save_step_time(pyplot, out / "step_time.png", records) else []
    path = out / "report.md"
    path.write_text(summary(run, records, plots))
    return path


def _load_records(run: Path) -> list[Record]:
    if not run.is_dir():
        raise ReportError(f"{run} is not a directory; pass the --output-dir of a `slime run`")
    if not (run / "metrics.jsonl").exists():
        hint = (
            "the run has not logged its first rollout yet"
            if (run / "config.yaml").exists()
            else "it is not a slime run directory"
        )
        raise ReportError(f"{run} has no metrics.jsonl: {hint}; pass the --output-dir of a `slime run`")
    return latest_attempt(read_metrics(run / "metrics.jsonl"))


def latest_attempt(records: list[Record]) -> list[Record]:
    """The records of the last ``slime run`` into this directory: a restart shows as a
    rollout id that does not grow. What a resumed run redid replaces the first try; a run
    started over from scratch (at rollout -1 or 0: a resume starts after a checkpoint)
    replaces it all."""
    starts = [i for i in range(1, len(records)) if records[i]["rollout_id"] <= records[i - 1]["rollout_id"]]
    if not starts:
        return records
    last = records[starts[-1] :]
    if last[0]["rollout_id"] <= 0:
        return last
    return [r for r in latest_attempt(records[: starts[-1]]) if r["rollout_id"] < last[0]["rollout_id"]] + last


def _pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no display needed)."""
    try:
        import matplotlib
    except ImportError:
        raise ReportError(
            "slime report draws with matplotlib, which is not installed; "
            'install it with: pip install "slime-core[report]"'
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


# ---------------------------------------------------------------- curves


def series(records: list[Record], *keys: str) -> Series:
    """The (rollout id, value) points of each key that some record has, labelled by the key."""
    out: Series = {}
    for key in keys:
        points = [(r["rollout_id"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        if points:
            out[key] = ([p[0] for p in points], [p[1] for p in points])
    return out


def eval_keys(records: list[Record]) -> list[str]:
    """``eval/<name>/<metric>`` keys, in first-seen order (eval timing excluded)."""
    keys = dict.fromkeys(k for r in records for k in r if k.startswith("eval/") and k.count("/") == 2)
    return list(keys)


def _figures(records: list[Record]) -> list[tuple[str, list[tuple[str, Series]]]]:
    """Each line-plot PNG as (file name, panels); a panel is (title, series)."""
    train = [r for r in records if r["rollout_id"] >= 0]
    return [
        ("reward.png", [("rollout reward", series(train, "rollout/reward_mean", "rollout/raw_reward_mean"))]),
        ("eval.png", [("evaluation", series(records, *eval_keys(records)))]),
        (
            "kl.png",
            [(key.split("/")[1], series(train, key)) for key in ("train/ppo_kl", "train/kl_loss", "train/pg_clipfrac")],
        ),
        (
            "response_length.png",
            [
                (
                    "response length (tokens)",
                    series(train, "rollout/response_length_mean", "rollout/response_length_max"),
                ),
                ("truncated fraction", series(train, "rollout/truncated_fraction")),
            ],
        ),
    ]


def _save_figure(pyplot, path: Path, panels: list[tuple[str, Series]]) -> bool:
    """Draw the non-empty panels side by side into ``path``; False (no file) if all are empty."""
    panels = [(title, lines) for title, lines in panels if lines]
    if not panels:
        return False
    figure, axes = pyplot.subplots(1, len(panels), figsize=FIGURE_INCHES, squeeze=False, layout="constrained")
    for ax, (title, lines) in zip(axes[0], panels):
        for label, (xs, ys) in lines.items():
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=label)
        ax.set(title=title, xlabel="rollout")
        ax.grid(alpha=0.3)
        if len(lines) > 1:
            ax.legend(fontsize="small")
    figure.savefig(path, dpi=DPI)
    pyplot.close(figure)
    return True


def step_times(records: list[Record]) -> dict[str, list[float]]:
    """Per training rollout, the seconds of each ``time/*`` phase and ``other``: the wall
    time since the previous record that no phase accounts for (switching parts between
    phases, logging); 0 for the first record and after a resume."""
    train = [r for r in records if r["rollout_id"] >= 0]
    phases = list(dict.fromkeys(k for r in train for k in r if k.startswith("time/")))
    out = {phase[5:]: [r.get(phase, 0.0) for r in train] for phase in phases}
    out["other"] = [_untimed(records[i - 1], r) if i else 0.0 for i, r in enumerate(records) if r["rollout_id"] >= 0]
    return out


def _untimed(previous: Record, record: Record) -> float:
    if record["rollout_id"] != previous["rollout_id"] + 1:
        return 0.0  # a resumed run: the gap is the restart
    return max(0.0, record["time"] - previous["time"] - record.get("perf/step_seconds", 0.0))


def _save_step_time(pyplot, path: Path, records: list[Record]) -> bool:
    """Stacked bars of `step_times` per rollout; False if no rollout was logged."""
    train = [r for r in records if r["rollout_id"] >= 0]
    if not train:
        return False
    ids = [r["rollout_id"] for r in train]
    figure, ax = pyplot.subplots(figsize=FIGURE_INCHES, layout="constrained")
    bottom = [0.0] * len(ids)
    for phase, seconds in step_times(records).items():
        ax.bar(ids, seconds, bottom=bottom, width=1.0, label=phase)
        bottom = [b + s for b, s in zip(bottom, seconds)]
    ax.set(title="step time by phase", xlabel="rollout", ylabel="seconds")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars
    figure.savefig(path, dpi=DPI)
    pyplot.close(figure)
    return True


# ---------------------------------------------------------------- summary


def summary(run: Path, records: list[Record], plots: list[str]) -> str:
    """The Markdown report: state, eval, reward trend, step time, throughput, plot links
    (``plots``: PNG names beside it)."""
    train = [r for r in records if r["rollout_id"] >= 0]
    lines = [f"# slime run report: {run.resolve().name}", "", f"Run directory: `{run}`", ""]
    lines += _state(run, train, records)
    lines += _evals(records)
    lines += _reward_trend(train)
    lines += _step_time(records, train)
    lines += ["## Plots", ""] + [f"![{name[:-4]}]({name})" for name in plots]
    return "\n".join(lines) + "\n"


def _state(run: Path, train: list[Record], records: list[Record]) -> list[str]:
    status = _read_json(run / "status.json").get("status", "unknown (no status.json)")
    planned = _read_config(run).get("num_rollout")
    done = f"{len(train)} of {planned}" if planned else str(len(train))
    lines = [f"- status: **{status}**", f"- rollouts logged: {done}"]
    if records:
        age = time.time() - records[-1]["time"]
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(records[-1]["time"]))
        lines.append(f"- last record: rollout {records[-1]['rollout_id']} at {stamp} ({_duration(age)} ago)")
    return lines + [""]


def _evals(records: list[Record]) -> list[str]:
    keys = eval_keys(records)
    if not keys:
        return []
    lines = ["## Evaluation", "", "| metric | first | last | best |", "|---|---|---|---|"]
    for key, (ids, values) in series(records, *keys).items():
        best = max(range(len(values)), key=lambda i: values[i])
        cells = [f"{values[i]:.4g} (rollout {ids[i]})" for i in (0, -1, best)]
        lines.append(f"| `{key}` | " + " | ".join(cells) + " |")
    return lines + ["", "Rollout -1 is the evaluation before training.", ""]


def _reward_trend(train: list[Record]) -> list[str]:
    """Mean reward of the first and the last tenth of the rollouts (at least one each)."""
    rewards = series(train, "rollout/reward_mean").get("rollout/reward_mean")
    if not rewards:
        return []
    values = rewards[1]
    k = max(1, len(values) // 10)
    first, last = sum(values[:k]) / k, sum(values[-k:]) / k
    change = last - first
    trend = "rising" if change > 0.01 else "falling" if change < -0.01 else "flat"
    return [
        "## Reward",
        "",
        f"- rollout reward: {first:.4g} (first {k}) → {last:.4g} (last {k}): {trend} ({change:+.4g})",
        "",
    ]


def _step_time(records: list[Record], train: list[Record]) -> list[str]:
    if not train:
        return []
    phases = {phase: sum(values) / len(values) for phase, values in step_times(records).items()}
    total = sum(phases.values())
    lines = ["## Step time", "", f"- mean wall time per rollout: {total:.3g} s", ""]
    lines += ["| phase | mean seconds | share |", "|---|---|---|"]
    lines += [f"| {phase} | {sec:.3g} | {sec / max(total, 1e-9):.0%} |" for phase, sec in phases.items()]
    lines += ["", "`other` is wall time between records that no phase timed (between phases, logging).", ""]
    for key, label in (
        ("perf/tokens_per_second", "tokens/s (trained tokens / step time)"),
        ("perf/train_tokens_per_second", "training tokens/s"),
    ):
        values = [r[key] for r in train if key in r]
        if values:
            lines.append(f"- {label}: {sum(values) / len(values):,.0f} (mean)")
    return lines + [""]


# ---------------------------------------------------------------- helpers


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def _read_config(run: Path) -> dict[str, Any]:
    path = run / "config.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(max(seconds, 0)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
