"""The counting task of `trl_vs_slime.py --task counting`: long-tailed responses at a realistic CPU size.

A prompt ``37 to 52:`` asks to count out every integer from its first number to its second,
space-separated (``37 38 39 ... 52``); the reward is the quickstart's exact match. The start
``a`` is uniform in 0..99 and the number of steps ``k = b - a`` log-uniform in 0..63, so most
answers are short and a few are long: 2 characters (one token each with the character
tokenizer) for ``k = 0``, about 50 on average, up to 250 for ``a = 99, k = 63``. A policy must
copy the start, increment with carries (``99 100``) and stop at the end: a warm-up leaves
mistakes on long counts for GRPO to remove.

Deterministic: the same seed always writes the same files.

    .venv/bin/python benchmarks/counting_task.py OUT_DIR [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

MAX_START, MAX_STEPS = 99, 63
N_TRAIN, N_EVAL = 4000, 200
#: Longest prompt and answer in characters, and so in tokens (``99 to 162:``, 99 .. 162).
MAX_PROMPT_LEN = len(f"{MAX_START} to {MAX_START + MAX_STEPS}:")
MAX_ANSWER_LEN = len(" ".join(str(i) for i in range(MAX_START, MAX_START + MAX_STEPS + 1)))


#: ``slime tiny-model`` flags of the task's model: a 25.2 M-parameter Qwen3 (hidden 512, 8 layers,
#: 4 query / 2 key-value heads of 128, MLP 1536, tied embeddings, the 100-token character vocabulary).
MODEL_FLAGS = ("--hidden-size", "512", "--num-layers", "8", "--max-positions", "320")
#: The response budget: the longest answer and end-of-text fit.
MAX_RESPONSE_LEN = 256
#: What the warm-up and GRPO runs share: the FSDP backend packing each step into rows of 8,192 tokens.
_COMMON_FLAGS = ("--input-key", "prompt", "--label-key", "label", "--train-backend", "fsdp",
                 "--use-dynamic-batch-size", "--max-tokens-per-gpu", "8192")


#: Warm-up steps (16 prompts each) and the GRPO learning rate, chosen by measurement (module docstring).
SFT_ROLLOUTS, GRPO_LR = 200, 5e-5


def sft_flags(train_data: Path) -> list[str]:
    """``slime run`` flags of the supervised warm-up: prompt + answer + end-of-text, 16 per step,
    AdamW at a constant 1e-3 after a 10-step ramp (a decayed warm-up leaves GRPO less to gain)."""
    return ["--prompt-data", str(train_data), *_COMMON_FLAGS, "--rollout-function", "sft", "--loss-type", "sft_loss",
            "--calculate-per-token-loss", "--rollout-batch-size", "16",
            "--n-samples-per-prompt", "1", "--global-batch-size", "16", "--lr", "1e-3", "--lr-warmup-iters", "10",
            "--seed", "1234"]


def grpo_flags(train_data: Path) -> list[str]:
    """``slime run`` flags of GRPO on the task (the benchmark adds sizes, steps and seeds):
    the CPU engine and the exact-match reward."""
    return ["--prompt-data", str(train_data), *_COMMON_FLAGS, "--rollout-engine", "cpu", "--rm-type", "exact_match",
            "--advantage-estimator", "grpo"]


def count_out(start: int, end: int) -> str:
    """The answer to ``{start} to {end}:``: every integer from start to end, space-separated."""
    return " ".join(str(i) for i in range(start, end + 1))


def draw_problem(rng: random.Random) -> tuple[int, int]:
    """(start, end): start uniform in 0..MAX_START, end - start log-uniform in 0..MAX_STEPS."""
    steps = int(math.exp(rng.uniform(0.0, math.log(MAX_STEPS + 2)))) - 1
    start = rng.randint(0, MAX_START)
    return start, start + min(steps, MAX_STEPS)


def make_split(seed: int = 0) -> tuple[list[dict], list[dict]]:
    """N_TRAIN train and N_EVAL eval records (``prompt``, ``label``); no eval problem is in train."""
    rng = random.Random(seed)
    evaluation = {draw_problem(rng) for _ in range(N_EVAL * 3)}
    evaluation = sorted(evaluation, key=lambda p: rng.random())[:N_EVAL]
    held_out = set(evaluation)
    train = []
    while len(train) < N_TRAIN:
        problem = draw_problem(rng)
        if problem not in held_out:
            train.append(problem)
    return [_record(*p) for p in train], [_record(*p) for p in evaluation]


def _record(start: int, end: int) -> dict:
    return {"prompt": f"{start} to {end}:", "label": count_out(start, end)}


def write_split(out_dir: Path, seed: int = 0) -> tuple[Path, Path]:
    """Write ``counting_train.jsonl`` and ``counting_eval.jsonl`` to ``out_dir``; their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, records in zip(("train", "eval"), make_split(seed)):
        path = out_dir / f"counting_{name}.jsonl"
        path.write_text("".join(json.dumps(record) + "\n" for record in records))
        paths.append(path)
    return paths[0], paths[1]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for path in write_split(args.out_dir, args.seed):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        lengths = sorted(len(row["label"]) for row in rows)
        print(f"wrote {len(rows)} prompts to {path}; answer length min {lengths[0]}, median "
              f"{lengths[len(lengths) // 2]}, mean {sum(lengths) / len(lengths):.1f}, max {lengths[-1]}")
