"""Throughput and peak memory of one GRPO step on CPU: slime's FSDP backend, padded vs packed,
and a plain transformers training loop, on a batch with a long tail of response lengths.

    .venv/bin/python benchmarks/fsdp_train.py                                  # tiny and 100m, 1 rank, 3 repeats
    .venv/bin/python benchmarks/fsdp_train.py --sizes tiny --repeats 5 --num-ranks 2
    .venv/bin/python benchmarks/fsdp_train.py --sizes 25m --variants "slime packed" "slime packed lora"  # LoRA

The batch: ``--groups`` prompts × ``--group-size`` samples, prompts of ~10 random tokens,
response lengths long-tailed (`long_tailed_batch`), rewards 0/1 with both in every group, a
fixed seed. Each variant and repeat runs in a fresh process (variants take turns, so a burst
of load from elsewhere hits all of them alike) that trains one step to warm up and then times
one more; the table shows the median over repeats:

- ``slime padded``:  ``TrainGroup(FSDPTrainRank)`` with ``--micro-batch-size``;
- ``slime packed``:  the same with ``--use-dynamic-batch-size --max-tokens-per-gpu``;
- ``slime packed lora``: the same with LoRA adapters of ``--lora-rank`` (alpha 2r) on every linear layer;
- ``transformers``:  no slime code: the same padded micro-batches through
  ``AutoModelForCausalLM``; a no-grad pass for the old log-probs (as slime's step does), then
  forward, log_softmax over the vocabulary, PPO-clipped GRPO loss with group-normalised
  advantages and a token-mean over the batch, backward, gradient clipping, AdamW.

Every variant runs float32, token-mean loss, lr 1e-6, clip_grad 1.0; the slime variants use
the backend's default attention on CPU (``slime_packed``: causal sdpa per bucket of samples of similar length, no
mask), the
transformers loop sdpa with its padding mask, as transformers does by default. Columns:
s/step = the median (and range) of the timed steps; response tok/s = response tokens / s/step;
processed tok/s counts every token the model ran, padding included (each pass once); padding =
the share of those that are padding; attention scores = per pass, Σ over samples of length² for slime, Σ
over rows of width² for transformers (sdpa with a mask computes every score, masked or not;
times heads and layers); peak RSS = VmHWM of
the training process (the Ray actor for slime, the largest over ranks) after loading and two
steps; loaded RSS = its VmRSS once the model is loaded.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

VARIANTS = ("slime padded", "slime packed", "slime packed lora", "transformers")
PROMPT_LENGTH = 10  # ± 2 tokens
FIRST_TOKEN = 4  # the character tokenizer's first non-special token


@dataclass(frozen=True)
class ModelSize:
    hidden_size: int
    num_layers: int
    max_response: int  # the longest response of the batch (and --rollout-max-response-len)
    groups: int  # prompts in the batch unless --groups says otherwise (100m: 4, to stay near 10 minutes)


SIZES = {
    "tiny": ModelSize(128, 4, 512, groups=8),
    "25m": ModelSize(512, 8, 296, groups=8),  # benchmarks/counting_task.py's model and response budget
    "100m": ModelSize(768, 14, 256, groups=4),
}


# ---------------------------------------------------------------- the batch (plain lists, no slime code)


def long_tailed_batch(groups: int, group_size: int, max_response: int, seed: int = 0) -> dict[str, list]:
    """Per-sample lists: ``tokens`` (prompt + response ids), ``response_lengths``, ``rewards``, ``group_ids``.

    Response lengths are the N quantiles (i + ½)/N of a log-normal with median max/16 and σ 1.75,
    clipped to [1, max] and shuffled: most responses are short and a few reach the maximum,
    for every seed. Each group has rewards 0 and 1.
    """
    rng = random.Random(seed)
    count = groups * group_size
    quantiles = [statistics.NormalDist(0.0, 1.75).inv_cdf((i + 0.5) / count) for i in range(count)]
    lengths = [min(max_response, max(1, round(max_response / 16 * math.exp(z)))) for z in quantiles]
    rng.shuffle(lengths)
    batch = {"tokens": [], "response_lengths": [], "rewards": [], "group_ids": []}
    for group in range(groups):
        prompt = _random_tokens(rng, PROMPT_LENGTH + rng.randint(-2, 2))
        rewards = [float(i % 2) for i in range(group_size)]
        rng.shuffle(rewards)
        for reward in rewards:
            length = lengths.pop()
            batch["tokens"].append(prompt + _random_tokens(rng, length))
            batch["response_lengths"].append(length)
            batch["rewards"].append(reward)
            batch["group_ids"].append(group)
    return batch


def _random_tokens(rng: random.Random, count: int) -> list[int]:
    return [rng.randrange(FIRST_TOKEN, 100) for _ in range(count)]


def describe(batch: dict[str, list]) -> str:
    lengths = sorted(batch["response_lengths"])
    half = sum(length >= lengths[-1] / 2 for length in lengths)
    return (
        f"{len(lengths)} samples, {sum(map(len, batch['tokens']))} tokens ({sum(lengths)} response); response "
        f"lengths min {lengths[0]}, median {statistics.median(lengths):g}, mean {statistics.mean(lengths):.0f}, "
        f"max {lengths[-1]}, {half} of them ≥ max/2"
    )


# ---------------------------------------------------------------- slime variants (child process)


def run_slime(args, batch: dict[str, list]) -> dict:
    """Start a `TrainGroup` of FSDP ranks, train a warm-up step, time one step."""
    from slime_core.rollout_batch import RolloutBatch
    from slime_core.testing import ray_session
    from slime_core.train_backend import TrainGroup
    from slime_fsdp.rank import FSDPTrainRank

    responses = batch["response_lengths"]
    rollout = RolloutBatch(
        batch["tokens"],
        responses,
        [[1] * r for r in responses],
        batch["rewards"],
        batch["group_ids"],
        [[0.0] * r for r in responses],
    )
    with ray_session(num_cpus=max(4, args.num_ranks)):
        group = TrainGroup(FSDPTrainRank, slime_config(args), args.num_ranks)
        try:
            group.init()
            loaded = max(m["rss_gib"] for m in group.call("memory"))
            group.train(0, rollout)
            start = time.perf_counter()
            metrics = group.train(1, rollout)
            seconds = time.perf_counter() - start
            peak = max(m["peak_rss_gib"] for m in group.call("memory"))
        finally:
            group.shutdown()
    return {"seconds": seconds, "loaded_gib": loaded, "peak_gib": peak, "loss": metrics["loss"]}


def slime_config(args):
    """The run's config: the batch as one rollout and one optimizer step, token-mean loss."""
    from slime_core.testing import make_config

    prompts = Path(args.model_dir) / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    batching = (
        dict(use_dynamic_batch_size=True, max_tokens_per_gpu=args.max_tokens_per_gpu)
        if args.variant.startswith("slime packed")
        else dict(micro_batch_size=args.micro_batch_size)
    )
    lora = dict(lora_rank=args.lora_rank, lora_alpha=2 * args.lora_rank) if args.variant.endswith("lora") else {}
    return make_config(
        prompts,
        args.model_dir,
        train_backend="fsdp",
        rollout_batch_size=args.groups,
        n_samples_per_prompt=args.group_size,
        num_steps_per_rollout=1,
        lr=1e-6,
        clip_grad=1.0,
        calculate_per_token_loss=True,
        rollout_max_response_len=SIZES[args.size].max_response,
        **batching,
        **lora,
    )


# ---------------------------------------------------------------- transformers baseline (child process, no slime code)


def run_transformers(args, batch: dict[str, list]) -> dict:
    """The same step as a plain loop over padded micro-batches (see the module docstring)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32, attn_implementation="sdpa")
    model.config.use_cache = False
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    loaded = _rss_gib("VmRSS")
    grpo_step(model, optimizer, batch, args.micro_batch_size)
    start = time.perf_counter()
    loss = grpo_step(model, optimizer, batch, args.micro_batch_size)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "loaded_gib": loaded, "peak_gib": _rss_gib("VmHWM"), "loss": loss}


def grpo_step(model, optimizer, batch: dict[str, list], micro_batch_size: int) -> float:
    """One optimizer step: old log-probs (no grad), then per micro-batch
    loss = Σ_it m_it·max(-ρ_it·A_i, -clip(ρ_it, 0.8, 1.2)·A_i) / Σ m, ρ = π/π_old, backward."""
    import torch

    advantages = group_normalised(torch.tensor(batch["rewards"]), torch.tensor(batch["group_ids"]))
    micro = [range(i, min(i + micro_batch_size, len(advantages))) for i in range(0, len(advantages), micro_batch_size)]
    num_tokens = sum(batch["response_lengths"])
    with torch.no_grad():
        old = [padded_log_probs(model, batch, rows)[0] for rows in micro]
    total = 0.0
    for rows, old_log_probs in zip(micro, old):
        log_probs, mask = padded_log_probs(model, batch, rows)
        ratio = torch.exp(log_probs - old_log_probs)  # (B, T)
        adv = advantages[list(rows), None]  # (B, 1)
        per_token = torch.maximum(-ratio * adv, -ratio.clamp(0.8, 1.2) * adv)
        loss = (per_token * mask).sum() / num_tokens
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return total


def group_normalised(rewards, group_ids):
    """A_i = (r_i - mean_g) / (std_g + 1e-6), the unbiased std over sample i's group g."""

    same = (group_ids[:, None] == group_ids[None, :]).float()  # (B, B)
    count = same.sum(1)
    mean = same @ rewards / count
    std = ((same @ rewards.square() - count * mean.square()) / (count - 1).clamp(min=1)).clamp(min=0).sqrt()
    return (rewards - mean) / (std + 1e-6)


def padded_log_probs(model, batch: dict[str, list], rows):
    """Right-padded rows through the model; (B, W-1) log π of each next token and its response mask."""
    import torch

    tokens = [batch["tokens"][i] for i in rows]
    width = max(map(len, tokens))
    input_ids = torch.zeros(len(tokens), width, dtype=torch.long)
    attention = torch.zeros(len(tokens), width, dtype=torch.long)
    mask = torch.zeros(len(tokens), width - 1)
    for row, (i, seq) in enumerate(zip(rows, tokens)):
        input_ids[row, : len(seq)] = torch.tensor(seq)
        attention[row, : len(seq)] = 1
        mask[row, len(seq) - batch["response_lengths"][i] - 1 : len(seq) - 1] = 1  # logits at p predict p + 1
    logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1]
    log_probs = torch.log_softmax(logits.float(), dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return log_probs, mask


def _rss_gib(key: str) -> float:
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    return int(status[key].split()[0]) / 2**20


# ---------------------------------------------------------------- the driver


def layout(args, batch: dict[str, list], variant: str) -> tuple[int, int]:
    """Per pass over the batch: tokens the model runs (padding included) and attention scores
    per head and layer (slime: Σ over samples of length², one causal sdpa each; transformers:
    Σ over rows of width², as sdpa with a mask computes them all). Read
    from the micro-batches slime's planner and ``slime_fsdp.inputs`` build; the transformers
    variant pads the same micro-batches as ``slime padded`` on one rank."""
    from slime_core.rank.micro_batches import fixed_micro_batches, token_budget_micro_batches
    from slime_core.rollout_batch import RolloutBatch, dp_rank_indices
    from slime_fsdp import inputs

    tokens, responses = batch["tokens"], batch["response_lengths"]
    ranks = args.num_ranks if variant.startswith("slime") else 1
    tokens_run = scores = 0
    for share in dp_rank_indices(RolloutBatch(tokens=tokens, group_ids=batch["group_ids"]), ranks):
        if variant.startswith("slime packed"):
            plan = token_budget_micro_batches(share, [len(t) for t in tokens], args.max_tokens_per_gpu)
        else:
            plan = fixed_micro_batches(share, args.micro_batch_size)
        for micro in plan:
            rows = [tokens[i] for i in micro], [responses[i] for i in micro]
            packed = variant.startswith("slime packed")
            ids = (inputs.packed(*rows, "cpu", "sdpa") if packed else inputs.padded(*rows, "cpu", 0)).input_ids
            tokens_run += ids.numel()
            if variant.startswith("slime"):  # slime_packed: one causal sdpa per sample
                scores += sum(len(t) ** 2 for t in rows[0])
            else:  # sdpa with a padding mask: every score of every row
                scores += ids.shape[0] * ids.shape[1] ** 2
    return tokens_run, scores


def measure(args, size: str, model_dir: Path, variant: str) -> dict:
    """One run of ``variant`` in a fresh process; its result dict."""
    command = [
        sys.executable,
        __file__,
        "--child",
        variant,
        "--model-dir",
        str(model_dir),
        "--sizes",
        size,
        *_shared_flags(args),
    ]
    output = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in output.stdout.splitlines() if line.startswith("RESULT ")]
    if output.returncode or not lines:
        raise RuntimeError(f"{variant} on {size} failed (exit {output.returncode}):\n{output.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def _shared_flags(args) -> list[str]:
    return [
        "--num-ranks",
        str(args.num_ranks),
        "--groups",
        str(args.groups),
        "--group-size",
        str(args.group_size),
        "--micro-batch-size",
        str(args.micro_batch_size),
        "--max-tokens-per-gpu",
        str(args.max_tokens_per_gpu),
    ]


def table(args, batch: dict[str, list], runs: dict[str, list[dict]]) -> str:
    response_tokens = sum(batch["response_lengths"])
    real_tokens = sum(map(len, batch["tokens"]))
    lines = [
        "| variant | s/step (min–max) | response tok/s | processed tok/s | padding | attention scores "
        "| loaded RSS GiB | peak RSS GiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant, results in runs.items():
        seconds = [r["seconds"] for r in results]
        step = statistics.median(seconds)
        processed, scores = layout(args, batch, variant)
        loaded = statistics.median(r["loaded_gib"] for r in results)
        peak = statistics.median(r["peak_gib"] for r in results)
        lines.append(
            f"| {variant} | {step:.2f} ({min(seconds):.2f}–{max(seconds):.2f}) "
            f"| {response_tokens / step:,.0f} | {processed / step:,.0f} | {1 - real_tokens / processed:.0%} "
            f"| {scores / 1e6:.1f} M | {loaded:.2f} | {peak:.2f} |"
        )
    return "\n".join(lines)


def build_model(size: str, root: Path) -> tuple[Path, int]:
    """The model of ``size`` saved under ``root``, and its parameter count."""
    from safetensors import safe_open

    from slime_core.tools.tiny_models import build_tiny_qwen3

    spec = SIZES[size]
    path = build_tiny_qwen3(
        root / size,
        hidden_size=spec.hidden_size,
        num_layers=spec.num_layers,
        max_positions=spec.max_response + PROMPT_LENGTH + 8,
    )
    with safe_open(str(path / "model.safetensors"), "pt") as weights:
        count = sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
    return path, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["tiny", "100m"])
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per variant; the median is shown")
    parser.add_argument("--num-ranks", type=int, default=1, help="FSDP ranks of the slime variants")
    parser.add_argument("--groups", type=int, help="prompts in the batch (default: 8 for tiny, 4 for 100m)")
    parser.add_argument("--group-size", type=int, default=4, help="samples per prompt")
    parser.add_argument("--micro-batch-size", type=int, default=4, help="padded variants")
    parser.add_argument("--max-tokens-per-gpu", type=int, default=2048, help="packed variant")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--lora-rank", type=int, default=16, help="slime packed lora: the adapters' rank (alpha 2r)")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)  # one measurement, in this process
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.variant, args.size = args.child, args.sizes[0]
        args.groups = args.groups or SIZES[args.size].groups
        batch = long_tailed_batch(args.groups, args.group_size, SIZES[args.size].max_response)
        run = run_transformers if args.child == "transformers" else run_slime
        print("RESULT " + json.dumps(run(args, batch)), flush=True)
        return
    print("$ " + shlex.join([os.path.relpath(sys.executable), *sys.argv]), flush=True)
    with tempfile.TemporaryDirectory(prefix="fsdp-train-bench-") as root:
        for size in args.sizes:
            report(argparse.Namespace(**{**vars(args), "groups": args.groups or SIZES[size].groups}), size, Path(root))


def report(args, size: str, root: Path) -> None:
    """Build the model of ``size``, run every variant ``--repeats`` times, print its table."""
    model_dir, num_params = build_model(size, root)
    spec = SIZES[size]
    batch = long_tailed_batch(args.groups, args.group_size, spec.max_response)
    print(
        f"\n## {size}: Qwen3, hidden {spec.hidden_size}, {spec.num_layers} layers, {num_params:,} parameters; "
        f"{args.num_ranks} rank(s), median of {args.repeats}\n\nbatch: {describe(batch)}\n",
        flush=True,
    )
    runs: dict[str, list[dict]] = {variant: [] for variant in args.variants}
    for _ in range(args.repeats):
        for variant in args.variants:
            runs[variant].append(measure(args, size, model_dir, variant))
            print(f"{size} {variant}: {runs[variant][-1]['seconds']:.2f} s", file=sys.stderr, flush=True)
    print(table(args, batch, runs), flush=True)


if __name__ == "__main__":
    main()
