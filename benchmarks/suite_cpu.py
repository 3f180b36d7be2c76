"""Where the test suite's time goes on this machine: runs pytest with a plugin that reads
``/proc/stat`` before and after every test, then prints the wall time, how busy the cores were
(all processes: the tests' Ray actors, engines and routers too), the CPU-seconds spent, the
shortest the suite could take with every idle moment filled (CPU-seconds / cores), and the
tests that left the most core-seconds idle.

    .venv/bin/python benchmarks/suite_cpu.py [PYTEST ARGS ...]   # default: the whole suite

Linux only (``/proc/stat``). Run it on a quiet machine: other load counts as busy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 8 * 60


def cpu_ticks() -> tuple[int, int]:
    """(all, idle) jiffies of every core since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(values), values[3] + values[4]  # idle + iowait


def main(pytest_args: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        records = Path(folder) / "tests.jsonl"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")])),
            "SUITE_CPU_RECORDS": str(records),
        }
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "suite_cpu_plugin", *pytest_args],
            cwd=ROOT,
            env=env,
            check=False,
        )
        rows = [json.loads(line) for line in records.read_text().splitlines()]
    cores = os.cpu_count() or 1
    wall = sum(row["seconds"] for row in rows)
    busy_core_s = sum(row["seconds"] * row["busy"] * cores for row in rows)
    print(
        f"\n{len(rows)} tests, {wall / 60:.1f} min of test time on {cores} cores, "
        f"{busy_core_s / (wall * cores):.0%} busy, {busy_core_s:,.0f} CPU-s "
        f"(goal <= {GOAL_S / 60:.0f} min: {'meets' if wall <= GOAL_S else 'misses'})"
    )
    print(f"every idle moment filled: {busy_core_s / cores / 60:.1f} min (goal {GOAL_S / 60:.0f} min)")
    print("most idle core-seconds:")
    for row in sorted(rows, key=lambda r: -r["seconds"] * (1 - r["busy"]))[:15]:
        print(
            f"  {row['seconds'] * (1 - row['busy']) * cores:6.1f}  ({row['seconds']:5.1f} s, {row['busy']:.0%} busy)"
            f"  {row['test']}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
