"""slime against TRL's GRPOTrainer: wall time per step, where it goes, and the eval reward after
N steps, on CPU, on one of two tasks:

- ``--task quickstart`` (default): the quickstart's 0.8 M-parameter model on addition, answers
  of 1-2 tokens (20 steps of 32 prompts × 8);
- ``--task counting``: a 25.2 M-parameter Qwen3 counting down by a step (benchmarks/counting_task.py),
  answers from 1 to 289 tokens, long-tailed (median 28, mean 45): 10 steps of 4 prompts × 8,
  lr 5e-5, up to 296 new tokens. Here static batches waste the most: TRL generates every group
  of a step until its longest answer ends and trains on the padded batch, while slime's CPU
  engine batches continuously and its FSDP rank trains on packed rows.

    .venv/bin/python benchmarks/trl_vs_slime.py [--task quickstart|counting] [--steps 20] [--quick]
                                                [--rounds 2] [--seed 1234] [--init HF_DIR] [--workdir DIR]
                                                [--slime-train-mode sync|async] [--rollout-backend sglang|vllm]

Needs TRL, for this benchmark only (not in the dev setup or CI); this pin leaves torch and
transformers as they are and adds no nvidia packages:

    uv pip install -p .venv/bin/python "trl==1.16.0"

Both sides start from the same weights: the task's model (`slime tiny-model`) after its
supervised warm-up (quickstart: examples/quickstart/sft_warmup.yaml; counting:
`counting_task.sft_flags`), made once in the workdir and reused (``--init`` gives one, e.g.
runs/quickstart/sft/hf/iter_0000299 from examples/quickstart/run.sh). Then N steps of GRPO on
the task's training prompts with the exact-match reward, the same group size, prompts per
step, learning rate (constant), response length, temperature, clip range, no KL term,
per-sample loss averaging and one optimizer step per rollout:

- slime: ``slime run examples/quickstart/grpo_addition.yaml`` (counting: `counting_task.grpo_flags`;
  FSDP train rank and the CPU
  engine as Ray actors, weights pushed to the engine after every step), in a subprocess;
  its timings come from metrics.jsonl.
- TRL: ``GRPOTrainer`` in a fresh Python process, as ``python train.py`` runs it (the policy
  model generates with ``generate``, so there is no weight sync); its phases are timed by
  wrapping the trainer's methods and with a callback.

The sides live in ``slime_side.py`` and ``trl_side.py``; the setup, results and greedy eval
they share in ``grpo_benchmark.py``; the counting task's data and flags in
``counting_task.py``.

The whole run is each side's wall time from launching its process to its exit, start-up and
imports included, less the evaluations and checkpoints (slime's run evaluates before and after
and saves; TRL's ends with the greedy eval below), which the two sides do differently.

Step time is each step's wall time (slime: between two metrics records, less the final eval
and save; TRL: between two optimizer steps). Both train with one torch thread per core
(slime's single FSDP rank, like TRL's process, takes them all); slime's Ray workers get TRL's process priority
(`SAME_PRIORITY`). On a machine shared with other work the figures swing with its load:
``--rounds`` alternates which side goes first.

CPU seconds per step: on a 2-core machine both sides are CPU-bound, so where the CPU goes
says more than the wall clock. slime's parts are Ray workers and servers, not children of
this process: a sampler reads every process's CPU time from /proc twice a second and sums it
by role (train rank, engine, driver, sglang-router, Ray's own processes) over the steps
between the first and the last metrics record; TRL's is this process's CPU time per step.

Eval reward: greedy exact-match accuracy on the task's held-out prompts (quickstart: the 200
of examples/quickstart/data/addition_eval.jsonl; counting: the first 100 of its 200), measured the same way
(transformers
``generate``) on the starting weights and on each side's weights after N steps.

Counting, 2026-11-25, quiet 2-core machine (load average 1.5-2.0), 2 rounds, from the step-300
weights of the warm-up's flags (`counting_task.sft_flags`, what this script makes without ``--init``):

    .venv/bin/python benchmarks/trl_vs_slime.py --task counting --rounds 2

slime 5.67 s/step (median 5.44: generation 3.20, training 1.80, weight sync 0.67, idle 0.00)
vs TRL 13.67 s (median 11.76: generation 6.36, training 7.29): 0.41x TRL's step (goal <= 0.7x),
7.5 vs 26.0 CPU-s per step; a second run of 2 rounds: 6.13 vs 14.17 s/step, 0.43x. Greedy eval
on 100 held-out prompts: 0.190 before; after 10 steps slime 0.230, TRL 0.190 (the same in all
four rounds). TRL runs without gradient checkpointing,
which its config turns on by default and slime's FSDP rank leaves off; with it (the first run
that day) TRL took 14.91 s/step and its eval was the same.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import counting_task  # noqa: E402  (benchmarks/, next to this script)
from grpo_benchmark import ROOT, SLIME, Result, Setup, eval_model_dir, eval_rows, parameter_count, run  # noqa: E402
from slime_side import run_slime  # noqa: E402
from trl_side import run_trl  # noqa: E402

#: slime's flags for ``--rollout-backend vllm``: vLLM's server serves the model in float32, as the CPU engine does;
#: weights go over the gloo broadcast, vLLM's default on CPU (0.3-0.6 s per 100 MB sync here, against 2.1-2.4 s for
#: the tensor transport, whose buckets pass vLLM's HTTP ``/collective_rpc``).
VLLM_FLAGS = ("--rollout-backend", "vllm", "--router", "none", "--vllm-dtype", "float32")
TRL_INSTALL = f'uv pip install -p {sys.executable} "trl==1.16.0"'


def warm_start(workdir: Path, setup: Setup) -> Path:
    """The task's model after its SFT warm-up (quickstart: as examples/quickstart/run.sh), made
    once per workdir and reused by later runs."""
    sft = workdir / "sft"
    if not list((sft / "hf").glob("iter_*")):
        run(SLIME, "tiny-model", str(workdir / "tiny-qwen3"), *setup.model_flags)
        run(
            SLIME,
            "run",
            *setup.sft_config,
            "--hf-checkpoint",
            str(workdir / "tiny-qwen3"),
            "--output-dir",
            str(sft),
            "--save",
            str(sft / "checkpoints"),
            "--save-hf",
            str(sft / "hf"),
            "--num-rollout",
            str(setup.sft_rollouts),
            "--save-interval",
            str(setup.sft_rollouts),
        )
    return sorted((sft / "hf").glob("iter_*"))[-1]


def counting_setup(workdir: Path, quick: bool) -> Setup:
    """The counting task (benchmarks/counting_task.py): a 25 M-parameter Qwen3, answers of 1 to
    289 tokens, 4 prompts × 8 per step (--quick: 3 steps of 2 prompts), data written to ``workdir``.
    slime runs no eval of its own here, and this script evaluates the first 100 held-out prompts
    only: 256-token greedy answers cost minutes on 2 cores."""
    train, evaluation = counting_task.write_split(workdir / "data")
    return Setup(
        steps=3 if quick else 10,
        prompts_per_step=2 if quick else 4,
        lr=counting_task.GRPO_LR,
        max_response_len=counting_task.MAX_RESPONSE_LEN,
        sft_rollouts=counting_task.SFT_ROLLOUTS,
        task="counting",
        train_data=train,
        eval_data=evaluation,
        eval_prompts=100,
        eval_name=None,
        slime_config=tuple(counting_task.grpo_flags(train)),
        model_flags=counting_task.MODEL_FLAGS,
        sft_config=tuple(counting_task.sft_flags(train)),
    )


def table(results: list[Result], setup: Setup, eval_before: float) -> str:
    rows = [
        ("steps", [str(len(r.step_seconds)) for r in results]),
        ("wall time per step, mean (s)", [f"{statistics.mean(r.step_seconds):.2f}" for r in results]),
        ("wall time per step, median (s)", [f"{statistics.median(r.step_seconds):.2f}" for r in results]),
    ]
    for phase in dict.fromkeys(phase for r in results for phase in r.phases):
        rows.append((f"  {phase}", [f"{r.phases[phase]:.2f}" if phase in r.phases else "-" for r in results]))
    rows.append(("CPU seconds per step, all processes", [f"{sum(r.cpu.values()):.2f}" for r in results]))
    for role in dict.fromkeys(role for r in results for role in r.cpu):
        rows.append((f"  {role}", [f"{r.cpu[role]:.2f}" if role in r.cpu else "-" for r in results]))
    rows += [
        ("whole run, launch to exit, less evals and saves (s), mean", [f"{r.total_seconds:.1f}" for r in results]),
        (f"eval reward before (greedy, {len(eval_rows(setup))} prompts)", [f"{eval_before:.3f}"] * len(results)),
        ("training reward, mean of the last 5 steps", [f"{statistics.mean(r.rewards):.3f}" for r in results]),
        (f"eval reward after {setup.steps} steps", ["/".join(f"{e:.3f}" for e in r.eval_after) for r in results]),
    ]
    width, cell = max(len(name) for name, _ in rows), max(8, *(len(v) for _, values in rows for v in values))
    lines = [f"{'':{width}}  " + "  ".join(f"{r.name:>{cell}}" for r in results)]
    lines += [f"{name:{width}}  " + "  ".join(f"{v:>{cell}}" for v in values) for name, values in rows]
    return "\n".join(lines + [note for r in results for note in r.notes])


def verdict(slime: Result, trl: Result, task: str) -> str:
    """The issue's goal for the task, met or not: counting, slime's step <= 0.7x TRL's with an
    eval at least TRL's; quickstart, slime's whole run (launch to exit, start-up included) <= 2x TRL's."""
    if task == "counting":
        ratio = statistics.mean(slime.step_seconds) / statistics.mean(trl.step_seconds)
        slime_eval, trl_eval = statistics.mean(slime.eval_after), statistics.mean(trl.eval_after)
        met = ratio <= 0.7 and slime_eval >= trl_eval
        return (
            f"goal (step <= 0.7x TRL's, eval >= TRL's): step {ratio:.2f}x, eval {slime_eval:.3f} vs "
            f"{trl_eval:.3f}: {'meets' if met else 'misses'}"
        )
    ratio = slime.total_seconds / trl.total_seconds
    return f"goal (whole run <= 2x TRL's): {ratio:.1f}x: {'meets' if ratio <= 2 else 'misses'}"


def merge(rounds: list[Result]) -> Result:
    """One side over several rounds: every step's time, mean phases and wall, each eval."""
    phases = {name: statistics.mean(r.phases[name] for r in rounds) for name in rounds[0].phases}
    cpu = {role: statistics.mean(r.cpu[role] for r in rounds) for role in rounds[0].cpu}
    return Result(
        rounds[0].name,
        [t for r in rounds for t in r.step_seconds],
        phases,
        statistics.mean(r.total_seconds for r in rounds),
        cpu,
        [w for r in rounds for w in r.rewards],
        [e for r in rounds for e in r.eval_after],
        list(dict.fromkeys(n for r in rounds for n in r.notes)),
    )


def parse_args(argv=None) -> tuple[argparse.Namespace, Setup]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--task",
        choices=["quickstart", "counting"],
        default="quickstart",
        help="quickstart: the tiny model on addition (answers of 1-2 tokens); counting: a 25 M-parameter "
        "model counting down by a step (answers of 1 to 289 tokens, long-tailed; benchmarks/counting_task.py)",
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="GRPO steps on each side (default 20, counting 10; --quick: 3)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 3 steps of 8 prompts (counting: 2) after a "
        "60-step warm-up (counting: its full warm-up, reused from the workdir)",
    )
    parser.add_argument("--seed", type=int, default=1234, help="seed of both sides: prompt order and sampling")
    parser.add_argument("--init", type=Path, default=None, help="start from this HF directory (skips the warm-up)")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where the data, the warm-up, both sides' runs and results.txt go "
        "(default runs/bench-trl-vs-slime, counting: runs/bench-trl-vs-slime-counting)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat both sides, alternating which goes first "
        "(slime-TRL, TRL-slime, ...), to even out a machine whose load changes",
    )
    parser.add_argument(
        "--slime-train-mode",
        choices=["sync", "async"],
        default="sync",
        help="slime's --train-mode; async generates the next rollout while it trains (one step off-policy)",
    )
    parser.add_argument(
        "--rollout-backend",
        choices=["sglang", "vllm"],
        default="sglang",
        help="slime's rollout backend: sglang (the CPU engine) or vllm (vLLM's CPU build from .venv-vllm, "
        "--router none; counting only: vLLM's CPU attention refuses the quickstart model's heads of 16)",
    )
    args = parser.parse_args(argv)
    if args.rollout_backend == "vllm" and args.task != "counting":
        parser.error("--rollout-backend vllm needs --task counting (vLLM's CPU attention takes no heads of 16)")
    args.workdir = args.workdir or ROOT / "runs" / (
        "bench-trl-vs-slime" + ("-counting" if args.task == "counting" else "")
    )
    if args.task == "counting":
        setup = counting_setup(args.workdir, args.quick)
    else:
        setup = Setup(steps=3, prompts_per_step=8, sft_rollouts=60) if args.quick else Setup()
    setup.steps, setup.seed, setup.slime_train_mode = args.steps or setup.steps, args.seed, args.slime_train_mode
    if args.rollout_backend == "vllm":
        setup.slime_config = (*setup.slime_config, *VLLM_FLAGS)
    return args, setup


def main(argv=None) -> int:
    args, setup = parse_args(argv)
    try:
        import trl  # noqa: F401
    except ImportError:
        print(
            f"This benchmark needs TRL, which is not installed here. Install it with:\n  {TRL_INSTALL}", file=sys.stderr
        )
        return 2
    args.workdir.mkdir(parents=True, exist_ok=True)
    init = args.init or warm_start(args.workdir, setup)
    print(f"{setup.task}: model {init} has {parameter_count(init) / 1e6:.1f} M parameters", flush=True)
    eval_before = eval_model_dir(init, setup)
    runs: dict[str, list[Result]] = {"slime": [], "TRL": []}
    for round_ in range(args.rounds):
        sides = [run_slime, run_trl] if round_ % 2 == 0 else [run_trl, run_slime]
        for side in sides:
            result = side(init, args.workdir / f"round{round_}", setup)
            result.notes.append(
                f"round {round_}, {result.name}: {statistics.mean(result.step_seconds):.2f} s/step "
                f"(median {statistics.median(result.step_seconds):.2f}), load average "
                f"{os.getloadavg()[0]:.1f} at its end"
            )
            runs[result.name].append(result)
    results = [merge(rounds) for rounds in runs.values()]
    report = "\n".join(
        [table(results, setup, eval_before), verdict(*results, setup.task), f"load average after: {os.getloadavg()}"]
    )
    print("\n" + report)
    (args.workdir / "results.txt").write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
