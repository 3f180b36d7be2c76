"""Training throughput of slime's Megatron-core backend against its FSDP backend: the same
model, batch and settings, one GRPO step.

    .venv/bin/python benchmarks/megatron_vs_fsdp.py                         # CPU: tiny, 1 rank, 3 repeats
    .venv/bin/python benchmarks/megatron_vs_fsdp.py --sizes tiny 100m --num-ranks 2 --tensor-parallel 2
    python benchmarks/megatron_vs_fsdp.py --gpu                             # one CUDA GPU per rank, bf16, MFU
    python benchmarks/megatron_vs_fsdp.py --gpu --in-process --repeats 1    # one GPU, the rank without Ray

CPU: the models and the long-tailed batch of ``benchmarks/fsdp_train.py`` (``--sizes``;
log-normal response lengths, a few reach the maximum). GPU: the ~0.6B-parameter Qwen3
config of ``benchmarks/fsdp_gpu.py`` (Qwen3's vocabulary, ``--hidden-size``,
``--num-layers``) and its batch. Each backend runs two ways (`VARIANTS`): ``padded``,
``--micro-batch-size`` samples per micro-batch, and ``dynamic``, micro-batches of at most
``--max-tokens-per-gpu`` tokens, which FSDP packs into one row and Megatron (whose local
attention has no packed-sequence path) pads into one row per sample. Token-mean loss, lr
1e-6, clip_grad 1.0; bf16 on GPU, float32 on CPU. ``--tensor-parallel`` applies to
Megatron (the FSDP ranks shard the whole model instead).

Each variant and repeat runs in a fresh process with its ranks as Ray actors (the variants
take turns, so a burst of load from elsewhere hits both alike), trains one step to warm up,
then times ``--steps`` steps; the table shows the median over repeats. A step includes the
no-grad pass for the old log-probs. tokens/s counts the batch's real tokens (prompt +
response), padding excluded; MFU (GPU) = 6 · parameters · tokens / s against
``--peak-tflops`` per GPU (attention and the no-grad pass not counted).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import fsdp_gpu  # noqa: E402
import fsdp_train  # noqa: E402

#: backend and batching: ``padded``: ``--micro-batch-size`` samples per micro-batch;
#: ``dynamic``: ``--use-dynamic-batch-size --max-tokens-per-gpu`` (FSDP packs the samples
#: into one row; Megatron pads them into rows, see the module docstring).
VARIANTS = ("fsdp padded", "fsdp dynamic", "megatron padded", "megatron dynamic")


def run_backend(args, model_dir: Path, batch: dict) -> dict:
    """In this (child) process: start the backend's ranks, warm up, time ``--steps`` steps."""
    from slime_core.rollout_batch import RolloutBatch
    from slime_core.testing import ray_session
    from slime_core.train_backend import TrainGroup

    responses = batch["response_lengths"]
    rollout = RolloutBatch(
        batch["tokens"],
        responses,
        [[1] * r for r in responses],
        batch["rewards"],
        batch["group_ids"],
        [[0.0] * r for r in responses],
    )
    with contextlib.nullcontext() if args.in_process else ray_session(num_cpus=max(4, args.num_ranks)):
        group = TrainGroup(
            rank_class(args.variant.split()[0]),
            config(args, model_dir),
            args.num_ranks,
            num_gpus_per_rank=1 if args.gpu else 0,
            in_process=args.in_process,
        )
        try:
            group.init()
            group.train(0, rollout)
            start = time.perf_counter()
            for step in range(args.steps):
                metrics = group.train(step + 1, rollout)
            seconds = (time.perf_counter() - start) / args.steps
        finally:
            group.shutdown()
    return {"seconds": seconds, "loss": metrics["loss"]}


def rank_class(backend: str):
    if backend == "megatron":
        from slime_megatron.rank import MegatronTrainRank

        return MegatronTrainRank
    from slime_fsdp.rank import FSDPTrainRank

    return FSDPTrainRank


def config(args, model_dir: Path):
    """One rollout = the batch = one optimizer step, token-mean loss, padded micro-batches."""
    from slime_core.testing import make_config

    prompts = model_dir / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    backend, batching = args.variant.split()
    layout = dict(tensor_model_parallel_size=args.tensor_parallel) if backend == "megatron" else {}
    micro = (
        dict(use_dynamic_batch_size=True, max_tokens_per_gpu=args.max_tokens_per_gpu)
        if batching == "dynamic"
        else dict(micro_batch_size=args.micro_batch_size)
    )
    return make_config(
        prompts,
        model_dir,
        train_backend=backend,
        rollout_batch_size=args.groups,
        n_samples_per_prompt=args.group_size,
        num_steps_per_rollout=1,
        lr=1e-6,
        clip_grad=1.0,
        calculate_per_token_loss=True,
        rollout_max_response_len=args.max_response,
        bf16=args.gpu,
        actor_num_gpus_per_node=args.num_ranks,
        **micro,
        **layout,
    )


def measure(args, model_dir: Path, variant: str) -> dict:
    """One run of ``variant`` in a fresh process; its result dict."""
    command = [sys.executable, __file__, "--child", variant, "--model-dir", str(model_dir), *shared_flags(args)]
    output = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in output.stdout.splitlines() if line.startswith("RESULT ")]
    if output.returncode or not lines:
        raise RuntimeError(f"{variant} failed (exit {output.returncode}):\n{output.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def shared_flags(args) -> list[str]:
    flags = [
        "--num-ranks",
        str(args.num_ranks),
        "--tensor-parallel",
        str(args.tensor_parallel),
        "--groups",
        str(args.groups),
        "--group-size",
        str(args.group_size),
        "--micro-batch-size",
        str(args.micro_batch_size),
        "--max-tokens-per-gpu",
        str(args.max_tokens_per_gpu),
        "--max-response",
        str(args.max_response),
        "--steps",
        str(args.steps),
        "--sizes",
        args.size,
        "--hidden-size",
        str(args.hidden_size),
        "--num-layers",
        str(args.num_layers),
    ]
    return flags + (["--gpu"] if args.gpu else []) + (["--in-process"] if args.in_process else [])


def table(args, batch: dict, num_params: int, runs: dict[str, list[dict]]) -> str:
    tokens = sum(map(len, batch["tokens"]))
    responses = sum(batch["response_lengths"])
    header = "| variant | s/step (min–max) | tokens/s | response tok/s |" + (" MFU |" if args.gpu else "")
    lines = [header, "|---|---:|---:|---:|" + ("---:|" if args.gpu else "")]
    for variant, results in runs.items():
        seconds = [r["seconds"] for r in results]
        step = statistics.median(seconds)
        spread = f"{min(seconds):.3f}–{max(seconds):.3f}"
        row = f"| {variant} | {step:.3f} ({spread}) | {tokens / step:,.0f} | {responses / step:,.0f} |"
        if args.gpu:
            row += f" {6 * num_params * tokens / step / (args.peak_tflops * 1e12 * args.num_ranks):.1%} |"
        lines.append(row)
    return "\n".join(lines)


def build(args, root: Path) -> tuple[Path, int, dict]:
    """The model directory, its parameter count and the batch."""
    if args.gpu:
        model_dir, num_params = fsdp_gpu.build_model(root, args)
        return model_dir, num_params, fsdp_train.long_tailed_batch(args.groups, args.group_size, args.max_response)
    model_dir, num_params = fsdp_train.build_model(args.size, root)
    return model_dir, num_params, fsdp_train.long_tailed_batch(args.groups, args.group_size, args.max_response)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(fsdp_train.SIZES), default=["tiny"], help="CPU models")
    parser.add_argument("--gpu", action="store_true", help="one CUDA GPU per rank, bf16, the fsdp_gpu.py model")
    parser.add_argument("--hidden-size", type=int, default=1024, help="GPU model")
    parser.add_argument("--num-layers", type=int, default=24, help="GPU model")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per variant; the median is shown")
    parser.add_argument("--steps", type=int, default=1, help="timed steps per run")
    parser.add_argument("--num-ranks", type=int, default=1, help="training ranks of both backends")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="one rank in the child process itself, no Ray (a GPU machine without Ray)",
    )
    parser.add_argument("--tensor-parallel", type=int, default=1, help="Megatron's tensor-parallel size")
    parser.add_argument("--groups", type=int, help="prompts in the batch (default: the size's, 16 on GPU)")
    parser.add_argument("--group-size", type=int, help="samples per prompt (default 4, 8 on GPU)")
    parser.add_argument("--max-response", type=int, help="longest response (default: the size's, 4096 on GPU)")
    parser.add_argument("--micro-batch-size", type=int, default=4, help="padded variants")
    parser.add_argument("--max-tokens-per-gpu", type=int, default=2048, help="dynamic variants (16384 on GPU)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak per GPU (H100 SXM: 989)")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)  # one measurement, in this process
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    return parser.parse_args()


def with_defaults(args, size: str) -> argparse.Namespace:
    spec = fsdp_train.SIZES[size]
    gpu = args.gpu
    return argparse.Namespace(
        **{
            **vars(args),
            "size": size,
            "groups": args.groups or (16 if gpu else spec.groups),
            "group_size": args.group_size or (8 if gpu else 4),
            "max_response": args.max_response or (4096 if gpu else spec.max_response),
            "max_tokens_per_gpu": 16384 if gpu and args.max_tokens_per_gpu == 2048 else args.max_tokens_per_gpu,
        }
    )


def main() -> None:
    args = parse_args()
    if args.child:
        args = with_defaults(args, args.sizes[0])
        args.variant = args.child
        batch = fsdp_train.long_tailed_batch(args.groups, args.group_size, args.max_response)
        print("RESULT " + json.dumps(run_backend(args, Path(args.model_dir), batch)), flush=True)
        return
    print("$ " + shlex.join([os.path.relpath(sys.executable), *sys.argv]), flush=True)
    for size in ["gpu"] if args.gpu else args.sizes:
        sized = with_defaults(args, "tiny" if args.gpu else size)
        with tempfile.TemporaryDirectory(prefix="megatron-vs-fsdp-") as root:
            model_dir, num_params, batch = build(sized, Path(root))
            print(
                f"\n## {size}: {num_params:,} parameters, {args.num_ranks} rank(s), Megatron TP "
                f"{args.tensor_parallel}, "
                f"median of {args.repeats}\n\nbatch: {fsdp_train.describe(batch)}\n",
                flush=True,
            )
            runs: dict[str, list[dict]] = {variant: [] for variant in args.variants}
            for _ in range(args.repeats):
                for variant in args.variants:
                    runs[variant].append(measure(sized, model_dir, variant))
                    print(f"{size} {variant}: {runs[variant][-1]['seconds']:.3f} s", file=sys.stderr, flush=True)
            print(table(sized, batch, num_params, runs), flush=True)


if __name__ == "__main__":
    main()
