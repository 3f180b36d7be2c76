"""Latency the router's middleware chain adds per request, over the bare sglang-router.

    .venv/bin/python benchmarks/router_middleware.py          # about a minute on 2 cores

One CPU engine on the tiny Qwen3 (``build_tiny_qwen3``), one ``start_router`` with
``--router-middleware metrics sessions retry``: its ``router_url`` is the bare sglang-router
(manual policy, one worker), its ``url`` the front with the chain. Requests go one at a time,
alternating between the two paths, so both see the same engine and machine state:

- ``/generate`` (``max_new_tokens=1``, the chat prompt's token ids) to sglang-router, and the
  same through the chain (``metrics`` and ``retry`` handle it, ``sessions`` passes it on): the
  cost of the front's extra HTTP hop and the pass-through middlewares;
- ``/v1/chat/completions`` through the chain, each in a new session (chat template, tokenising,
  recording the trajectory, OpenAI answer), against ``/generate`` of the same prompt ids to
  sglang-router: the cost of ``sessions`` on top.

Added latency is the per-pair difference (chain minus bare), p50 and p99 over the pairs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

CHAIN = ["metrics", "sessions", "retry"]
MESSAGES = [{"role": "user", "content": "What is 12 + 30?"}]


def timed(client: httpx.Client, url: str, body: dict, headers: dict | None = None) -> float:
    """Milliseconds of one POST (which must succeed)."""
    start = time.perf_counter()
    client.post(url, json=body, headers=headers).raise_for_status()
    return (time.perf_counter() - start) * 1000


def measure(router, prompt_ids: list[int], count: int, warmup: int) -> dict[str, list[float]]:
    """Milliseconds per request on each path, requests alternating between the paths."""
    generate = {
        "input_ids": prompt_ids,
        "sampling_params": {"temperature": 0, "max_new_tokens": 1},
        "return_logprob": True,
    }
    chat = {"messages": MESSAGES, "temperature": 0, "max_tokens": 1}
    times: dict[str, list[float]] = {name: [] for name in ("bare /generate", "chain /generate", "chain chat")}
    with httpx.Client(timeout=60, trust_env=False) as client:
        for i in range(warmup + count):
            pair = {
                "bare /generate": timed(client, f"{router.router_url}/generate", generate),
                "chain /generate": timed(client, f"{router.url}/generate", generate),
                "chain chat": timed(
                    client, f"{router.url}/v1/chat/completions", chat, {"X-Session-Id": uuid.uuid4().hex}
                ),
            }
            if i >= warmup:
                for name, value in pair.items():
                    times[name].append(value)
    return times


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per path (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()

    from slime_core.testing import make_config
    from slime_core.tools.tiny_models import build_tiny_qwen3
    from slime_router.launch import start_router
    from slime_router.sessions.chat_template import ChatTemplate
    from slime_sglang.cpu_engine.launch import cpu_engine

    with tempfile.TemporaryDirectory() as folder:
        model_dir = build_tiny_qwen3(Path(folder) / "model")
        prompts = Path(folder) / "prompts.jsonl"
        prompts.write_text('{"prompt": "1+1="}\n')
        config = make_config(prompts, model_dir, rollout_batch_size=1, router_middleware=CHAIN, output_dir=folder)
        prompt_ids = ChatTemplate.load(model_dir).first_prompt(MESSAGES, None, {})
        with cpu_engine(model_dir, "--num-threads", "1") as engine_url, start_router(config, [engine_url]) as router:
            times = measure(router, prompt_ids, args.requests, args.warmup)

    print(f"\n    {' '.join(['.venv/bin/python', *sys.argv])}\n")
    print(
        f"--router-middleware {' '.join(CHAIN)}; one CPU engine; {args.requests} sequential requests per path, "
        f"prompt {len(prompt_ids)} tokens, 1 new token (ms)\n"
    )
    print("| path | p50 | p99 |\n|---|---:|---:|")
    for name, values in times.items():
        print(f"| {name} | {percentile(values, 0.5):.2f} | {percentile(values, 0.99):.2f} |")
    for name in ("chain /generate", "chain chat"):
        added = [chain - bare for chain, bare in zip(times[name], times["bare /generate"])]
        print(f"| added: {name} vs bare /generate | {percentile(added, 0.5):.2f} | {percentile(added, 0.99):.2f} |")


if __name__ == "__main__":
    main()
