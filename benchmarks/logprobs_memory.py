"""Peak memory and time of per-token log-probs (forward + backward): chunked vs naive.

    .venv/bin/python benchmarks/logprobs_memory.py                  # CPU, T=4096, V=152064
    .venv/bin/python benchmarks/logprobs_memory.py --device cuda    # GPU, T=8192, V=152064

Each variant runs in a fresh subprocess. On CPU the peak is the process's maximum resident
set (``resource.getrusage``; tracemalloc does not see torch's allocations), on CUDA it is
``torch.cuda.max_memory_allocated``. "extra" is the peak minus the peak once the bf16 logits
exist: what the computation adds, the bf16 gradient of the logits (one logits' size) included.

naive:   log_softmax(logits.float() / τ).gather(tokens)  (a float32 copy of the logits)
chunked: slime_core.algorithms.log_probs_from_logits      (chunk_size rows in float32 at a time;
         one row per --chunk-size given)
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from functools import partial

GiB = 1024**3


def _naive(logits, tokens, temperature):
    import torch

    log_p = torch.log_softmax(logits.float() / temperature, dim=-1)
    return log_p.gather(-1, tokens[:, None]).squeeze(-1)


def _chunked(logits, tokens, temperature, chunk_size):
    from slime_core.algorithms import log_probs_from_logits

    return log_probs_from_logits(logits, tokens, temperature, chunk_size=chunk_size)


def _peak_bytes(device: str) -> int:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def run_variant(args) -> dict:
    """One measurement, in this (fresh) process."""
    import torch

    torch.manual_seed(0)
    compute = _naive if args.variant == "naive" else partial(_chunked, chunk_size=args.chunk_size[0])
    if args.device == "cuda":  # warm up kernels and the allocator outside the measurement
        warm = torch.randn(64, args.vocab, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        compute(warm, torch.zeros(64, dtype=torch.long, device="cuda"), args.temperature).sum().backward()
        del warm
        torch.cuda.reset_peak_memory_stats()
    logits = torch.empty(args.seq_len, args.vocab, dtype=torch.bfloat16, device=args.device).normal_()
    logits.requires_grad_()
    tokens = torch.randint(0, args.vocab, (args.seq_len,), device=args.device)
    baseline = _peak_bytes(args.device)
    start = time.perf_counter()
    compute(logits, tokens, args.temperature).sum().backward()
    peak = _peak_bytes(args.device)
    seconds = time.perf_counter() - start
    return {"variant": args.variant, "seconds": seconds, "peak": peak, "extra": peak - baseline}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--seq-len", type=int, default=None, help="T (default: 4096 on CPU, 8192 on CUDA)")
    parser.add_argument("--vocab", type=int, default=152064)
    parser.add_argument("--chunk-size", type=int, nargs="+", default=[1024, 256], help="one or more")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--variant", choices=["naive", "chunked"], help=argparse.SUPPRESS)  # child process
    args = parser.parse_args()
    args.seq_len = args.seq_len or (8192 if args.device == "cuda" else 4096)
    if args.variant:
        print(json.dumps(run_variant(args)))
        return
    logits_gib = args.seq_len * args.vocab * 2 / GiB
    sizes = f"T={args.seq_len} V={args.vocab} bf16 logits ({logits_gib:.2f} GiB)"
    print(f"{sizes}, forward + backward, device={args.device}")
    print(f"{'variant':<16}{'time (s)':>10}{'peak (GiB)':>12}{'extra (GiB)':>13}")
    sizes_args = ["--seq-len", str(args.seq_len), "--vocab", str(args.vocab), "--temperature", str(args.temperature)]
    common = [__file__, "--device", args.device, *sizes_args]
    runs = [("naive", "naive", 0)] + [(f"chunked ({c})", "chunked", c) for c in args.chunk_size]
    for name, variant, chunk_size in runs:
        command = [sys.executable, *common, "--variant", variant, "--chunk-size", str(chunk_size)]
        result = json.loads(subprocess.check_output(command))
        peak, extra = result["peak"] / GiB, result["extra"] / GiB
        print(f"{name:<16}{result['seconds']:>10.2f}{peak:>12.2f}{extra:>13.2f}")


if __name__ == "__main__":
    main()
