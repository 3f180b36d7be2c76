"""Generated tokens per second of the CPU engine against transformers ``generate`` and vLLM's
CPU build, and the latency sglang-router adds in front of the CPU engine.

    .venv/bin/python benchmarks/cpu_engine.py            # a few minutes on 2 cores
    .venv/bin/python benchmarks/cpu_engine.py --vllm     # adds vLLM (needs .venv-vllm, see slime-vllm)

Workload: 64 prompts of 16-64 random tokens, each with its own ``max_new_tokens`` drawn
long-tailed (log-normal, median 48, capped at 512) and generated to that length (greedy,
EOS ignored), on a random Qwen3 with hidden size 256 and 4 layers (``build_tiny_qwen3``).
Tokens/s counts the requested tokens only.

- CPU engine: ``slime engine serve --max-running-requests 64``; the 64 requests are sent at
  once over HTTP and batched continuously (requests leave as soon as they are done).
- transformers, one at a time: ``model.generate`` per prompt.
- transformers, static batches of 8: ``model.generate`` on 8 left-padded prompts; every
  batch runs until its longest request is done.

- vLLM (``--vllm``): the server a ``--rollout-backend vllm`` run starts
  (``slime_vllm.servers.server_command``: eager, unchunked prefill; ``--max-num-seqs`` the
  prompt count, float32), the same 64 requests at once on ``/inference/v1/generate``.

Router: ``/generate`` with ``max_new_tokens=1``, one request at a time, straight to the
engine and through ``sglang_router.launch_router`` (round robin, one worker); p50 / p99.
All variants use the same number of torch threads (``--threads``, default 1).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def workload(count: int, seed: int) -> list[tuple[list[int], int]]:
    """(prompt token ids, max_new_tokens) pairs; lengths are log-normal around 48."""
    rng = random.Random(seed)
    return [
        (
            [rng.randrange(4, 100) for _ in range(rng.randint(16, 64))],
            max(4, min(512, round(rng.lognormvariate(math.log(48), 1.0)))),
        )
        for _ in range(count)
    ]


def run_engine(url: str, requests: list[tuple[list[int], int]]) -> float:
    """Seconds to answer every request, all sent at once."""

    async def send_all():
        async with httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=len(requests))) as client:

            async def one(prompt, length):
                body = {
                    "input_ids": prompt,
                    "sampling_params": {"temperature": 0, "max_new_tokens": length, "ignore_eos": True},
                }
                answer = (await client.post(f"{url}/generate", json=body)).json()
                assert answer["meta_info"]["completion_tokens"] == length, answer

            await asyncio.gather(*(one(p, n) for p, n in requests))

    start = time.perf_counter()
    asyncio.run(send_all())
    return time.perf_counter() - start


def run_vllm(url: str, requests: list[tuple[list[int], int]]) -> float:
    """Seconds for vLLM to answer every request, all sent at once."""

    async def send_all():
        async with httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=len(requests))) as client:

            async def one(prompt, length):
                params = {"temperature": 0, "max_tokens": length, "ignore_eos": True}
                answer = await client.post(
                    f"{url}/inference/v1/generate", json={"token_ids": prompt, "sampling_params": params}
                )
                assert answer.json()["usage"]["completion_tokens"] == length, answer.text

            await asyncio.gather(*(one(p, n) for p, n in requests))

    start = time.perf_counter()
    asyncio.run(send_all())
    return time.perf_counter() - start


def vllm_seconds(model_dir: Path, requests: list[tuple[list[int], int]], log: Path) -> float:
    """`run_vllm` on a vLLM server started here for ``model_dir`` (stopped after)."""
    from slime_core.cluster.engine_servers import wait_healthy
    from slime_core.cluster.ports import free_port
    from slime_sglang.cpu_engine.launch import stop
    from slime_vllm.servers import find_vllm_python, missing_vllm_message, server_command

    python = find_vllm_python()
    if python is None:
        raise SystemExit(missing_vllm_message())
    port = free_port()
    options = {"max_num_seqs": len(requests), "dtype": "float32", "max_model_len": 1024}
    with open(log, "ab") as output:
        server = subprocess.Popen(
            server_command(python, str(model_dir), port, "127.0.0.1", 0, options), stdout=output, stderr=output
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(server, url, 600)
        run_vllm(url, requests[:4])  # warm-up
        return run_vllm(url, requests)
    finally:
        stop(server)


def run_transformers(model, requests: list[tuple[list[int], int]], batch_size: int) -> float:
    """Seconds for ``generate`` over the requests in order, ``batch_size`` at a time (left-padded)."""
    import torch

    start = time.perf_counter()
    for first in range(0, len(requests), batch_size):
        chunk = requests[first : first + batch_size]
        width = max(len(p) for p, _ in chunk)
        ids = torch.tensor([[0] * (width - len(p)) + p for p, _ in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in chunk])
        longest = max(n for _, n in chunk)
        with torch.inference_mode():
            model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=longest,
                min_new_tokens=longest,
                do_sample=False,
                pad_token_id=0,
            )
    return time.perf_counter() - start


def router_latency(engine_url: str, count: int) -> dict[str, list[float]]:
    """Milliseconds of ``count`` one-token requests, direct and through sglang-router."""
    from slime_core.cluster.ports import free_port
    from slime_sglang.cpu_engine.launch import stop

    port = free_port()
    router = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sglang_router.launch_router",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--prometheus-port",
            str(free_port()),
            "--worker-urls",
            engine_url,
            "--policy",
            "round_robin",
            "--log-level",
            "warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    router_url = f"http://127.0.0.1:{port}"
    try:
        _wait(f"{router_url}/readiness")
        body = {"input_ids": [5, 6, 7], "sampling_params": {"temperature": 0, "max_new_tokens": 1}}
        with httpx.Client(timeout=60) as client:
            times = {"direct": [], "router": []}
            for i in range(count + 10):  # the first 10 of each warm up
                for name, url in (("direct", engine_url), ("router", router_url)):
                    start = time.perf_counter()
                    client.post(f"{url}/generate", json=body).raise_for_status()
                    if i >= 10:
                        times[name].append((time.perf_counter() - start) * 1000)
        return times
    finally:
        stop(router)


def _wait(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} never answered 200")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads in every variant (default 1: on a small shared machine more threads "
        "mostly measure contention)",
    )
    parser.add_argument("--router-requests", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vllm", action="store_true", help="also vLLM's CPU build (slime-vllm's server)")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from slime_core.tools.tiny_models import build_tiny_qwen3
    from slime_sglang.cpu_engine.launch import cpu_engine

    torch.set_num_threads(args.threads)
    threads = args.threads
    requests = workload(args.prompts, args.seed)
    tokens = sum(n for _, n in requests)
    lengths = sorted(n for _, n in requests)
    with tempfile.TemporaryDirectory() as folder:
        model_dir = build_tiny_qwen3(
            Path(folder) / "model", hidden_size=args.hidden_size, num_layers=args.layers, max_positions=1024
        )
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        run_transformers(model, requests[:2], batch_size=2)  # warm-up
        seconds = {
            "transformers generate, one prompt at a time": run_transformers(model, requests, 1),
            "transformers generate, static batches of 8": run_transformers(model, requests, 8),
        }
        with cpu_engine(model_dir, "--max-running-requests", str(args.prompts), "--num-threads", str(threads)) as url:
            run_engine(url, requests[:4])  # warm-up
            seconds["CPU engine (continuous batching, 64 at once)"] = run_engine(url, requests)
            latency = router_latency(url, args.router_requests)
        if args.vllm:
            seconds["vLLM CPU (continuous batching, 64 at once)"] = vllm_seconds(
                model_dir, requests, Path(folder) / "vllm.log"
            )

    print(f"\n    {' '.join(['.venv/bin/python', *sys.argv])}\n")
    print(
        f"{args.prompts} prompts, {tokens} tokens to generate (max_new_tokens median {statistics.median(lengths):.0f}, "
        f"max {lengths[-1]}), Qwen3 hidden {args.hidden_size} x {args.layers} layers, {threads} torch threads\n"
    )
    print("| variant | seconds | tokens/s | vs one at a time |\n|---|---:|---:|---:|")
    baseline = seconds["transformers generate, one prompt at a time"]
    for name, value in seconds.items():
        print(f"| {name} | {value:.1f} | {tokens / value:.0f} | {baseline / value:.1f}x |")
    print(f"\n/generate, max_new_tokens=1, {args.router_requests} sequential requests (ms)\n")
    print("| path | p50 | p99 |\n|---|---:|---:|")
    for name, values in latency.items():
        print(f"| {name} | {percentile(values, 0.5):.2f} | {percentile(values, 0.99):.2f} |")
    added = [r - d for r, d in zip(latency["router"], latency["direct"])]
    print(f"| added by the router | {percentile(added, 0.5):.2f} | {percentile(added, 0.99):.2f} |")


if __name__ == "__main__":
    main()
