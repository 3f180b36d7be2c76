"""The counting task of `trl_vs_slime.py --task counting`: long-tailed responses at a realistic CPU size.

A prompt ``37 by 5:`` asks to count down from its first number by its second, space-separated,
to the last number that is not negative (``37 32 27 22 17 12 7 2``); the reward is the
quickstart's exact match. The start ``a`` is 0..99 and the step ``s`` 1..9, so the answer has
``a // s + 1`` numbers: most are short and a few are long (median 28 characters, one token
each with the character tokenizer; mean 45; 10% over 100; up to 289 for ``99 by 1:``). A policy
must copy the start, subtract the step with borrows (``41 36 31``) and stop before going below
zero; a warm-up leaves mistakes on long counts for GRPO to remove.

The first version counted up ranges (``37 to 52:`` → ``37 38 ... 52``). Its warm-up never learnt
where to stop: counting up needs nothing from the prompt but the start, and after 500 steps
end-of-text had only 0.12 probability, on average, where the answer stops (greedy answers ran on
to the length limit; greedy accuracy 0.01). Counting down by a step reads the step from
the prompt at every number, and the stop is the step's business too.

The warm-up (`sft_flags`, 300 steps of 16 at a constant 1e-3, ~5 min on 2 cores) ends
mid-transition, where GRPO has both signal and room: greedy exact match 0.06 on the first
100 held-out prompts after 200 steps, 0.19 after 300, with end-of-text at 0.94 probability where
the answer stops.

Deterministic: the same seed always writes the same files. The 900 problems are split into 200
held out for the eval and 700 the training records are drawn from.

    .venv/bin/python benchmarks/counting_task.py OUT_DIR [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

MAX_START, MAX_STEP = 99, 9
N_TRAIN, N_EVAL = 4000, 200


#: ``slime tiny-model`` flags of the task's model: a 25.2 M-parameter Qwen3 (hidden 512, 8 layers,
#: 4 query / 2 key-value heads of 128, MLP 1536, tied embeddings, the 100-token character vocabulary).
MODEL_FLAGS = ("--hidden-size", "512", "--num-layers", "8", "--max-positions", "320")
#: The response budget: the longest answer (``99 by 1:``, 289 characters) and end-of-text fit.
MAX_RESPONSE_LEN = 296
#: What the warm-up and GRPO runs share: the FSDP backend packing each step into rows of 8,192 tokens.
_COMMON_FLAGS = (
    "--input-key",
    "prompt",
    "--label-key",
    "label",
    "--train-backend",
    "fsdp",
    "--use-dynamic-batch-size",
    "--max-tokens-per-gpu",
    "8192",
)


#: Warm-up steps (16 prompts each; module docstring) and the GRPO learning rate.
SFT_ROLLOUTS, GRPO_LR = 300, 5e-5


def sft_flags(train_data: Path) -> list[str]:
    """``slime run`` flags of the supervised warm-up: prompt + answer + end-of-text, 16 per step,
    AdamW at a constant 1e-3 after a 10-step ramp (a decayed warm-up leaves GRPO less to gain)."""
    return [
        "--prompt-data",
        str(train_data),
        *_COMMON_FLAGS,
        "--rollout-function",
        "sft",
        "--loss-type",
        "sft_loss",
        "--calculate-per-token-loss",
        "--rollout-batch-size",
        "16",
        "--n-samples-per-prompt",
        "1",
        "--global-batch-size",
        "16",
        "--lr",
        "1e-3",
        "--lr-warmup-iters",
        "10",
        "--seed",
        "1234",
    ]


def grpo_flags(train_data: Path) -> list[str]:
    """``slime run`` flags of GRPO on the task (the benchmark adds sizes, steps and seeds):
    the CPU engine and the exact-match reward."""
    return [
        "--prompt-data",
        str(train_data),
        *_COMMON_FLAGS,
        "--rollout-engine",
        "cpu",
        "--rm-type",
        "exact_match",
        "--advantage-estimator",
        "grpo",
    ]


def count_down(start: int, step: int) -> str:
    """The answer to ``{start} by {step}:``: start, start - step, ... down to the last one >= 0."""
    return " ".join(str(i) for i in range(start, -1, -step))


def make_split(seed: int = 0) -> tuple[list[dict], list[dict]]:
    """N_TRAIN train records drawn (with repeats) from the problems not held out, and N_EVAL
    held-out eval records (``prompt``, ``label``)."""
    rng = random.Random(seed)
    problems = [(start, step) for start in range(MAX_START + 1) for step in range(1, MAX_STEP + 1)]
    rng.shuffle(problems)
    evaluation, train = problems[:N_EVAL], problems[N_EVAL:]
    return [_record(*rng.choice(train)) for _ in range(N_TRAIN)], [_record(*p) for p in evaluation]


def _record(start: int, step: int) -> dict:
    return {"prompt": f"{start} by {step}:", "label": count_down(start, step)}


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
        print(
            f"wrote {len(rows)} prompts to {path}; answer length min {lengths[0]}, median "
            f"{lengths[len(lengths) // 2]}, mean {sum(lengths) / len(lengths):.1f}, max {lengths[-1]}"
        )
