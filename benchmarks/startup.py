"""Start-up of ``slime run`` on the quickstart's GRPO config: seconds from launching the
command to the first rollout's generation, against the 10 s goal, with the run's own
timeline (``start-up ...`` lines of its slime.log: Ray up, placement, train ranks loaded,
engines healthy, router ready, engines routed, first rollout submitted / generated).

    .venv/bin/python benchmarks/startup.py [--rounds 3] [--keep DIR]

Each round is a fresh ``slime run`` process (cold: its own Ray, engine, router and train
rank) on a tiny random model of the quickstart's architecture, for one rollout without
evaluation. The figure is the median over the rounds. Each round also prints the CPU time
its processes had used by the first generation, per part (driver, train rank, engine,
router, Ray's own processes): on a shared machine that moves much less than wall time.

Latest (2026-11-27 at ebf50e8, a noisy hour: 9.3-13.1 s for the same code): median 11.4 s over
6 rounds against 11.55 s for cb42e19 in pairs of rounds taken in turn, within the noise; since
ebf50e8 ``ray.init`` no longer waits in whole seconds for the raylet to register (see
``slime_core.cluster.local_ray``). Before (2026-11-27 at 2c1887a, a slower day): median 9.95 s over 6 rounds against
10.35 s for a553eaa taken in turn with it, 14.9 against 16.4 CPU-s by the first generation (the
start-up figure in docs/benchmarks.md says where). Before (2026-11-25 at 17eb4c7, quiet machine, bytecode
compiled): median 8.9 s over 5 rounds
(8.8-10.0 s; the slow rounds are those where ``ray.init`` waited a whole second more for the
raylet to register), about 14 CPU-s by the first generation (train rank 3.5-3.9, engine 3.1-3.4,
driver 3.0-3.3, Ray's own processes 2.6-3.0). The same machine gave 8.9 s at b03b898, where an earlier
session had measured 11.1 s: the machine moves these figures as much as slime does. The figures
assume compiled bytecode: where the venv has none and ``PYTHONDONTWRITEBYTECODE`` is set,
point ``PYTHONPYCACHEPREFIX`` at a folder filled once with ``python -m compileall``, or every
process compiles torch and transformers again (about twice the CPU).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLIME = str(Path(sys.executable).with_name("slime"))
GOAL_S = 10.0
MARK = re.compile(r"^start-up\s+([\d.]+)s\s+(.*)$")
#: command-line words that name a part of the run; anything else is Ray's (workers not yet an actor included)
PARTS = (
    ("engine serve", "engine"),
    ("sglang_router", "router"),
    ("sglang::router", "router"),
    ("slime_router.front", "router"),
    ("RankProcess", "train rank"),
    ("EngineServer", "engine actor"),
    (" run ", "driver"),
)


class CpuClock:
    """Samples the CPU time (user + system) of a process and everything below it, per part."""

    def __init__(self, pid: int):
        self.pid, self.seen, self._stop = pid, {}, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def by_part(self) -> Counter:
        """CPU seconds so far of each part (a process's last sample)."""
        totals = Counter()
        for cpu, command in list(self.seen.values()):
            totals[next((part for word, part in PARTS if word in command), "ray")] += cpu
        return totals

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        from slime_core.testing import descendants

        tick = os.sysconf("SC_CLK_TCK")
        while not self._stop.wait(0.2):
            for pid in [self.pid, *descendants(self.pid)]:
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                self.seen[pid] = ((int(fields[11]) + int(fields[12])) / tick, command)


def one_round(work: Path, model: Path, index: int) -> tuple[float, list[tuple[float, str]], float, Counter]:
    """(seconds from launch to "first rollout submitted", the run's timeline, seconds to exit,
    CPU seconds per part by then)."""
    out = work / f"run{index}"
    command = [
        SLIME,
        "run",
        str(ROOT / "examples/quickstart/grpo_addition.yaml"),
        "--hf-checkpoint",
        str(model),
        "--num-rollout",
        "1",
        "--eval-interval",
        "0",
        "--output-dir",
        str(out),
    ]
    env_home = work / f"ray{index}"
    env_home.mkdir()
    launched = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "HOME": str(env_home), "RAY_TMPDIR": str(env_home)},
    )
    clock = CpuClock(process.pid)
    first_generation, cpu = None, Counter()
    timeline = []
    for line in process.stdout:
        match = MARK.match(line.strip())
        if match:
            timeline.append((float(match[1]), match[2]))
            if match[2] == "first rollout submitted" and first_generation is None:
                first_generation, cpu = time.perf_counter() - launched, clock.by_part()
    code = process.wait()
    clock.stop()
    if code != 0 or first_generation is None:
        raise SystemExit(f"round {index}: slime run exited {code}; see {out}/slime.log")
    return first_generation, timeline, time.perf_counter() - launched, cpu


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
        first, timeline, total, cpu = one_round(work, model, index)
        firsts.append(first)
        steps = "  ".join(f"{event} {seconds:.1f}" for seconds, event in timeline)
        parts = ", ".join(f"{part} {seconds:.1f}" for part, seconds in cpu.most_common())
        print(
            f"round {index}: first generation {first:.1f} s after launch (whole 1-rollout run {total:.1f} s); "
            f"in-run timeline: {steps}; CPU s by then: {sum(cpu.values()):.1f} ({parts}); "
            f"load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    median = statistics.median(firsts)
    verdict = "meets" if median <= GOAL_S else "misses"
    print(
        f"start-up to first generation: median {median:.1f} s over {len(firsts)} rounds "
        f"(goal <= {GOAL_S:.0f} s: {verdict})"
    )


if __name__ == "__main__":
    main()
