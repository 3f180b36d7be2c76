"""``slime report RUN_DIR [--out DIR]``: plots and a Markdown summary of a run, finished or
still going (`slime_core.tools.report`)."""

from __future__ import annotations

import sys


def add_report_command(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help="write PNG plots and a Markdown summary of a run directory",
        description="Plot a run's reward, evaluation, KL / clip fraction, response length and step-time "
        "breakdown from its metrics.jsonl, and summarise them in report.md. Works while the run is going.",
    )
    parser.add_argument("run_dir", help="the run's --output-dir")
    parser.add_argument("--out", default=None, help="where to write (default: RUN_DIR/report)")
    parser.set_defaults(func=_report)


def _report(args) -> int:
    from slime_core.tools.report import ReportError, write_report

    try:
        path = write_report(args.run_dir, args.out)
    except (ReportError, ValueError) as exc:
        print(f"slime report: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path} and its plots in {path.parent}")
    return 0
