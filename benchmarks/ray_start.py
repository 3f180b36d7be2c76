"""Seconds ``start_local_ray`` takes to bring up a local Ray, with and without its wait for the
raylet's registration (``slime_core.cluster.local_ray``: without it, Ray's own check for the new node
retries in whole seconds), each round a fresh interpreter, the two variants taken in turn.

    .venv/bin/python benchmarks/ray_start.py [--rounds 5]

Latest (2026-11-27 at 81ccb01, 2 cores, a noisy hour): median 3.40 s against 3.61 s without the
wait over 5 rounds each (2.36-3.77 s against 2.66-3.98 s); an earlier run of the same comparison
the same day: 3.41 s against 3.74 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

#: One start in a fresh interpreter, in a short temporary folder of its own (Ray's socket paths
#: must fit in 108 bytes); prints the seconds. ``sys.argv[1]``: "with" or "without" the wait.
ONE_START = """
import contextlib, os, shutil, sys, tempfile, time
folder = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
os.environ.update(HOME=folder, RAY_TMPDIR=folder)
import ray
from slime_core.cluster import local_ray
if sys.argv[1] == "without":
    local_ray._once_registered = lambda check: check
start = time.monotonic()
local_ray.start_local_ray(num_cpus=2, _temp_dir=folder)
print(time.monotonic() - start)
ray.shutdown()
shutil.rmtree(folder, ignore_errors=True)
"""


def one_start(variant: str) -> float:
    done = subprocess.run([sys.executable, "-c", ONE_START, variant], capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    seconds = {"with": [], "without": []}
    for round_ in range(args.rounds):
        for variant in seconds:
            seconds[variant].append(one_start(variant))
            print(f"round {round_}, {variant} the wait: {seconds[variant][-1]:.2f} s", flush=True)
    for variant, values in seconds.items():
        print(
            f"{variant} the registration wait: median {statistics.median(values):.2f} s "
            f"({min(values):.2f}-{max(values):.2f} s) over {len(values)} starts"
        )


if __name__ == "__main__":
    main()
