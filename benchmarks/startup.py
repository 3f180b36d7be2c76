"""Start-up of ``slime run`` on the quickstart's GRPO config: seconds from launching the
command to the first rollout's generation, against the 10 s goal, with the run's own
timeline (``start-up ...`` lines of its slime.log: Ray up, placement, train ranks loaded,
engines healthy, router ready, first rollout submitted / generated).

    .venv/bin/python benchmarks/startup.py [--rounds 3] [--keep DIR]

Each round is a fresh ``slime run`` process (cold: its own Ray, engine, router and train
rank) on a tiny random model of the quickstart's architecture, for one rollout without
evaluation. The figure is the median over the rounds.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLIME = str(Path(sys.executable).with_name("slime"))
GOAL_S = 10.0
MARK = re.compile(r"^start-up\s+([\d.]+)s\s+(.*)$")


def one_round(work: Path, model: Path, index: int) -> tuple[float, list[tuple[float, str]], float]:
    """(seconds from launch to "first rollout submitted", the run's timeline, seconds to exit)."""
    out = work / f"run{index}"
    command = [SLIME, "run", str(ROOT / "examples/quickstart/grpo_addition.yaml"), "--hf-checkpoint", str(model),
               "--num-rollout", "1", "--eval-interval", "0", "--output-dir", str(out)]
    env_home = work / f"ray{index}"
    env_home.mkdir()
    launched = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "HOME": str(env_home), "RAY_TMPDIR": str(env_home)})
    first_generation = None
    timeline = []
    for line in process.stdout:
        match = MARK.match(line.strip())
        if match:
            timeline.append((float(match[1]), match[2]))
            if match[2] == "first rollout submitted" and first_generation is None:
                first_generation = time.perf_counter() - launched
    code = process.wait()
    if code != 0 or first_generation is None:
        raise SystemExit(f"round {index}: slime run exited {code}; see {out}/slime.log")
    return first_generation, timeline, time.perf_counter() - launched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="slime-startup-"))
    model = work / "tiny-qwen3"
    subprocess.run([SLIME, "tiny-model", str(model)], check=True, capture_output=True)
    firsts = []
    for index in range(args.rounds):
        first, timeline, total = one_round(work, model, index)
        firsts.append(first)
        steps = "  ".join(f"{event} {seconds:.1f}" for seconds, event in timeline)
        print(f"round {index}: first generation {first:.1f} s after launch (whole 1-rollout run {total:.1f} s); "
              f"in-run timeline: {steps}", flush=True)
    median = statistics.median(firsts)
    verdict = "meets" if median <= GOAL_S else "misses"
    print(f"start-up to first generation: median {median:.1f} s over {len(firsts)} rounds "
          f"(goal <= {GOAL_S:.0f} s: {verdict})")


if __name__ == "__main__":
    main()
