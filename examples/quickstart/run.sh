#!/usr/bin/env bash
# The quickstart: a tiny model learns two-digit addition with RL on a CPU, in minutes.
#
#   bash examples/quickstart/run.sh [--output-dir DIR] [extra `slime run` flags for GRPO]
#
# 1. `slime tiny-model` writes a random 0.8 M-parameter Qwen3 with a character tokenizer;
# 2. a supervised warm-up (sft_warmup.yaml) teaches it the answer format and some addition;
# 3. GRPO (grpo_addition.yaml) with the math reward, evaluated on 200 held-out prompts
#    before training and every 20 rollouts: the eval reward rises.
# Everything lands in the output directory (default runs/quickstart): metrics.jsonl of
# each stage, checkpoints, and the logs. Run it from the repository root.
set -euo pipefail

out=runs/quickstart
if [[ "${1:-}" == "--output-dir" ]]; then
    out=$2
    shift 2
fi
slime=${SLIME:-.venv/bin/slime}

"$slime" tiny-model "$out/tiny-qwen3"
"$slime" run examples/quickstart/sft_warmup.yaml --hf-checkpoint "$out/tiny-qwen3" \
    --output-dir "$out/sft" --save "$out/sft/checkpoints" --save-hf "$out/sft/hf"
warm=$(ls -d "$out"/sft/hf/iter_* | sort | tail -1)
"$slime" run examples/quickstart/grpo_addition.yaml --hf-checkpoint "$warm" --output-dir "$out/grpo" "$@"
