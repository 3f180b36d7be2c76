"""Bytes moved per weight sync: ``--update-weight-mode delta`` (each encoding) against full syncs.

    .venv/bin/python benchmarks/delta_weight_sync.py [--rollouts 4] [--lr 1e-4] [--keep DIR]

Each encoding is one ``slime run`` of the quickstart's GRPO config (float32 FSDP on CPU, one
CPU engine; ``--lr``: the config's 1e-4 by default, slime's default is 1e-6) on a random model
of the quickstart's architecture (``slime tiny-model``), for ``--rollouts`` rollouts without
evaluation. A random model earns no reward (no gradient, no change), so the runs add an entropy
bonus (``--entropy-coef 0.001``): Adam then moves every weight by about the learning rate each
step, as in a real run. Every sync logs the bytes it published (``weight_update/bytes``: what
each engine host reads) and the bytes of the full weights (``weight_update/full_bytes``: what a
full sync moves). The first sync is a full version; the figure is the median over the later
ones, as a share of the full sync.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLIME = str(Path(sys.executable).with_name("slime"))
CONFIG = ROOT / "examples" / "quickstart" / "grpo_addition.yaml"


def run(folder: Path, model: Path, encoding: str, rollouts: int, lr: float) -> list[dict]:
    """The metrics records of one delta-sync run."""
    out = folder / f"run-{encoding}-{lr:g}"
    flags = ["--hf-checkpoint", str(model), "--output-dir", str(out), "--num-rollout", str(rollouts), "--lr", str(lr)]
    flags += ["--eval-interval", "1000000", "--entropy-coef", "0.001", "--update-weight-mode", "delta"]
    flags += ["--update-weight-delta-encoding", encoding, "--update-weight-local-checkpoint-dir", str(folder / "local")]
    subprocess.run([SLIME, "run", str(CONFIG), *flags], cwd=ROOT, check=True, capture_output=True, text=True)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if "weight_update/bytes" in r]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs in this folder")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="slime-delta-bench-"))
    model = folder / "tiny-qwen3"
    if not model.exists():
        subprocess.run([SLIME, "tiny-model", str(model)], check=True, capture_output=True)
    print(f"lr {args.lr:g}")
    print(f"{'encoding':<10} {'full sync':>12} {'first (full)':>13} {'delta, median':>14} {'share':>7}")
    for encoding in ("xor", "overwrite"):
        records = run(folder, model, encoding, args.rollouts, args.lr)
        full = records[-1]["weight_update/full_bytes"]
        delta = statistics.median(r["weight_update/bytes"] for r in records[1:])
        first = records[0]["weight_update/bytes"]
        print(f"{encoding:<10} {full:>12,.0f} {first:>13,.0f} {delta:>14,.0f} {delta / full:>7.1%}")


if __name__ == "__main__":
    main()
