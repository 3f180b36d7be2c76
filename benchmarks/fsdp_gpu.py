"""One GRPO step of slime's FSDP backend on one CUDA GPU: packed (varlen flash) vs padded.

    python benchmarks/fsdp_gpu.py                      # ~0.6B-parameter Qwen3 config, bf16
    python benchmarks/fsdp_gpu.py --hidden-size 512 --num-layers 8

One rank in this process (what a GPU rank does inside its Ray actor), a randomly initialised
Qwen3 config with Qwen3's vocabulary size, the long-tailed batch of `fsdp_train.py`
(log-normal response lengths, a few reach ``--max-response``), bf16 compute with float32
master weights, token-mean loss. Each variant trains one warm-up step, then ``--steps`` timed
steps. Printed: s/step, processed and response tokens/s, peak CUDA memory, and model FLOPs
utilisation (6 · params · tokens per step, attention excluded, against ``--peak-tflops``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from fsdp_train import describe, long_tailed_batch  # noqa: E402

#: The MFU the FSDP step should reach on this 0.45 B config (an H100).
GOAL_MFU = 0.35


def build_model(root: Path, args) -> tuple[Path, int]:
    """A random Qwen3 config with the character tokenizer, saved as a Hugging Face directory."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from slime_core.tools.tiny_models import build_char_tokenizer

    tokenizer = build_char_tokenizer(root)
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=args.hidden_size,
        intermediate_size=3 * args.hidden_size,
        num_hidden_layers=args.num_layers,
        num_attention_heads=args.hidden_size // 64,
        num_key_value_heads=max(1, args.hidden_size // 256),
        head_dim=64,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    model.save_pretrained(root)
    return root, sum(p.numel() for p in model.parameters())


def measure(args, model_dir: Path, batch: dict, packed: bool) -> dict:
    """Start a rank, warm up, time ``--steps`` steps; tear the process group down after."""
    import torch
    import torch.distributed as dist

    from slime_core.rollout_batch import RolloutBatch
    from slime_core.testing import make_config
    from slime_core.train_backend import TrainGroup
    from slime_fsdp.rank import FSDPTrainRank

    prompts = model_dir / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    batching = (
        dict(use_dynamic_batch_size=True, max_tokens_per_gpu=args.max_tokens_per_gpu)
        if packed
        else dict(micro_batch_size=args.micro_batch_size)
    )
    config = make_config(
        prompts,
        model_dir,
        train_backend="fsdp",
        rollout_batch_size=args.groups,
        n_samples_per_prompt=args.group_size,
        num_steps_per_rollout=1,
        lr=1e-6,
        clip_grad=1.0,
        bf16=True,
        calculate_per_token_loss=True,
        rollout_max_response_len=args.max_response,
        gradient_checkpointing=args.gradient_checkpointing,
        fsdp_torch_compile=args.fsdp_torch_compile,
        **batching,
    )
    responses = batch["response_lengths"]
    rollout = RolloutBatch(
        batch["tokens"],
        responses,
        [[1] * r for r in responses],
        batch["rewards"],
        batch["group_ids"],
        [[0.0] * r for r in responses],
    )
    group = TrainGroup(FSDPTrainRank, config, 1, in_process=True)
    try:
        group.init()
        group.train(0, rollout)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        for step in range(args.steps):
            group.train(step + 1, rollout)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / args.steps
        if args.profile:
            profile_step(group, rollout)
        return {
            "seconds": seconds,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
            "attention": group.ranks[0]._rank.attn_implementation,
        }
    finally:
        dist.destroy_process_group()


def profile_step(group, rollout) -> None:
    """One more step under torch's profiler: the operators that took the most GPU time."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        group.train(99, rollout)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden-size", type=int, default=1024)
    parser.add_argument("--num-layers", type=int, default=24)
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-response", type=int, default=4096)
    parser.add_argument("--micro-batch-size", type=int, default=4, help="padded variant")
    parser.add_argument("--max-tokens-per-gpu", type=int, default=16384, help="packed variant")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--variants", default="packed,padded", help="comma-separated: packed, padded")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--fsdp-torch-compile", action="store_true", help="compile the decoder layers (slime's option)")
    parser.add_argument("--profile", action="store_true", help="print the GPU-time profile of one more step")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak of the GPU (H100 SXM: 989)")
    args = parser.parse_args()
    batch = long_tailed_batch(args.groups, args.group_size, args.max_response)
    tokens = sum(map(len, batch["tokens"]))
    with tempfile.TemporaryDirectory() as root:
        model_dir, params = build_model(Path(root), args)
        print(f"model: {params / 1e9:.2f} B params; batch: {describe(batch)}")
        for name in args.variants.split(","):
            packed = {"packed": True, "padded": False}[name]
            result = measure(args, model_dir, batch, packed)
            mfu = 6 * params * tokens / result["seconds"] / (args.peak_tflops * 1e12)
            print(
                f"{name:7s} {result['attention']:>14s}  {result['seconds']:.3f} s/step  "
                f"{tokens / result['seconds']:,.0f} tok/s  {sum(batch['response_lengths']) / result['seconds']:,.0f} "
                f"resp tok/s  peak {result['peak_gib']:.1f} GiB  MFU {mfu:.1%} (real tokens, attention excluded; "
                f"goal >= {GOAL_MFU:.0%}: {'meets' if mfu >= GOAL_MFU else 'misses'})",
                flush=True,
            )


if __name__ == "__main__":
    main()
