"""What ``--true-on-policy-mode`` costs: rollout and training seconds with and without it.

    .venv/bin/python benchmarks/true_on_policy.py [--rollouts 3] [--keep DIR]

Two ``slime run``s of the quickstart's GRPO config (32 prompts x 8 samples, responses of up to
8 tokens, FSDP on CPU, one CPU engine) on a random model of the quickstart's architecture
(``slime tiny-model``), without evaluation, taken in turn: without the mode, then with it. The
figures are medians over the rollouts after the first (which warms up): ``time/rollout``
(generation; in the mode the engine runs one more forward pass per request, alone) and
``time/train`` (log-probs and the optimizer step; in the mode every sample is a forward and
backward of its own instead of one packed row), and the largest ``train/train_rollout_logprob_abs_diff``
(the mean |train - rollout| log-prob of a rollout's tokens).
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


def run(folder: Path, model: Path, name: str, rollouts: int, *flags: str) -> list[dict]:
    """The metrics records of one run."""
    out = folder / name
    command = [SLIME, "run", str(CONFIG), "--hf-checkpoint", str(model), "--output-dir", str(out)]
    command += ["--num-rollout", str(rollouts), "--eval-interval", "1000000", *flags]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs in this folder")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="slime-true-on-policy-bench-"))
    model = folder / "tiny-qwen3"
    subprocess.run([SLIME, "tiny-model", str(model)], check=True, capture_output=True)
    print(f"{'mode':<16} {'rollout s':>10} {'train s':>9} {'log-prob gap':>13}")
    for name, flags in (("default", ()), ("true-on-policy", ("--true-on-policy-mode",))):
        records = [r for r in run(folder, model, name, args.rollouts, *flags) if "time/train" in r]
        rollout = statistics.median(r["time/rollout"] for r in records[1:])
        train = statistics.median(r["time/train"] for r in records[1:])
        gap = max(r["train/train_rollout_logprob_abs_diff"] for r in records)
        print(f"{name:<16} {rollout:>10.2f} {train:>9.2f} {gap:>13.3g}")


if __name__ == "__main__":
    main()
