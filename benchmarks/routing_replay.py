"""The train/rollout log-prob gap of a MoE run with and without rollout routing replay (R3).

    .venv/bin/python benchmarks/routing_replay.py               # 3 rollouts per run, 4 runs
    .venv/bin/python benchmarks/routing_replay.py --rollouts 5
    .venv/bin/python benchmarks/routing_replay.py --train-backend megatron   # one Megatron rank instead

Each run is ``slime run`` (its own process) on a tiny Qwen3-MoE (hidden 64, 2 layers, 4 experts,
top 2) with the CPU engine (float32) and one FSDP (or Megatron) rank that computes in bf16 (``--bf16``), so the
trainer's routers see other numbers than the engine's, as a GPU trainer's and SGLang's kernels do.
Two models: the tiny model as built (random routers: clear winners), and the same with near-tied
routers (each expert's router row is a shared row plus 2% of its own), where precision decides
more tokens' experts. Each model runs without and with ``--use-rollout-routing-replay``, from the
same seed, so the first rollout's samples are the same.

Per run the table shows ``train/train_rollout_logprob_abs_diff`` (mean |log π_train − log π_rollout|
over the trained tokens, at the one update of a rollout): at the first rollout (the same samples and
weights in both runs of a model: the effect of R3 alone) and averaged over the rollouts; and, with
R3, ``train/routing_replay_update_mismatch`` averaged (the share of (token, MoE layer) decisions
where the bf16 trainer's router would have picked other experts than the engine did).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SLIME = str(Path(sys.executable).with_name("slime"))
GAP, CHANGED = "train/train_rollout_logprob_abs_diff", "train/routing_replay_update_mismatch"


def run(model: Path, data: Path, out: Path, rollouts: int, r3: bool, backend: str) -> dict:
    """One ``slime run``: the first rollout's gap, and the rollouts' mean gap and changed routing."""
    argv = [SLIME, "run", "--hf-checkpoint", str(model), "--prompt-data", str(data), "--rm-type", "math"]
    argv += ["--rollout-engine", "cpu", "--router", "none", "--bf16", "--num-rollout", str(rollouts)]
    argv += ["--rollout-batch-size", "4", "--n-samples-per-prompt", "4", "--rollout-max-response-len", "16"]
    argv += ["--lr", "1e-3", "--entropy-coef", "0.01", "--output-dir", str(out), "--train-backend", backend]
    argv += ["--use-rollout-routing-replay"] if r3 else []
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if r.get("rollout_id", -1) >= 0 and GAP in r]
    changed = [r[CHANGED] for r in records if CHANGED in r]
    return {
        "first": records[0][GAP],
        "mean": sum(r[GAP] for r in records) / len(records),
        "changed": sum(changed) / len(changed) if changed else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=3)
    parser.add_argument("--train-backend", default="fsdp", choices=("fsdp", "megatron"))
    args = parser.parse_args()
    from slime_core.tools.tiny_models import build_tiny_model, tie_moe_routers

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = root / "prompts.jsonl"
        data.write_text(
            "".join(
                json.dumps({"prompt": f"{a}+{b}=", "label": str(a + b)}) + "\n" for a in range(10) for b in range(10)
            )
        )
        print(
            f"{'routers':<10} {'R3':<4} {'gap, rollout 1':>15} {'gap, mean':>10} {'routing changed by R3':>22}",
            flush=True,
        )
        for name in ("random", "near-tied"):
            model = build_tiny_model(root / name, "qwen3_moe", hidden_size=64)
            if name == "near-tied":
                tie_moe_routers(model)
            for r3 in (False, True):
                got = run(model, data, root / f"{name}-{r3}", args.rollouts, r3, args.train_backend)
                changed = "" if got["changed"] is None else f"{got['changed']:.1%}"
                print(
                    f"{name:<10} {'on' if r3 else 'off':<4} {got['first']:>15.3e} {got['mean']:>10.3e} {changed:>22}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
