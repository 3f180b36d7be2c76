#!/usr/bin/env bash
# The vision example: a tiny vision-language model learns to count coloured squares in a
# picture, on a CPU: images in prompts end to end.
#
#   bash examples/vision_counting/run.sh [--output-dir DIR] [extra `slime run` flags for GRPO]
#
# 1. `slime tiny-model --family qwen2_5_vl` writes a random Qwen2.5-VL (vision tower, language
#    model, processor) with a character tokenizer;
# 2. a supervised warm-up (sft_warmup.yaml) teaches it the answer format and some counting;
# 3. GRPO (grpo_counting.yaml) with the exact-match reward, evaluated greedily on 100 held-out
#    pictures before training and every 10 rollouts.
# The pictures are in data/ (made by make_data.py) as base64 PNGs inside the JSONL. Everything
# lands in the output directory (default runs/vision_counting). Run it from the repository root.
set -euo pipefail

out=runs/vision_counting
if [[ "${1:-}" == "--output-dir" ]]; then
    out=$2
    shift 2
fi
slime=${SLIME:-.venv/bin/slime}

"$slime" tiny-model "$out/tiny-vlm" --family qwen2_5_vl --hidden-size 64 --num-layers 2
"$slime" run examples/vision_counting/sft_warmup.yaml --hf-checkpoint "$out/tiny-vlm" \
    --output-dir "$out/sft" --save "$out/sft/checkpoints" --save-hf "$out/sft/hf"
warm=$(ls -d "$out"/sft/hf/iter_* | sort | tail -1)
"$slime" run examples/vision_counting/grpo_counting.yaml --hf-checkpoint "$warm" --output-dir "$out/grpo" "$@"
