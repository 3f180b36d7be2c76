"""The real sglang-router (the Rust load balancer) in front of two CPU engines."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest

from slime_core.ports import free_port
from slime_sglang.cpu_engine.launch import stop

pytestmark = pytest.mark.integration


def start_router(worker_urls: list[str]) -> tuple[subprocess.Popen, str]:
    """sglang-router on free ports (its Prometheus exporter too: the default port may be taken)."""
    port = free_port()
    command = [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
               "--prometheus-port", str(free_port()), "--worker-urls", *worker_urls,
               "--policy", "round_robin", "--log-level", "warn"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), f"http://127.0.0.1:{port}"


def wait_ready(router: subprocess.Popen, url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert router.poll() is None, f"sglang-router exited with code {router.returncode}"
        try:
            if httpx.get(f"{url}/readiness", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"sglang-router at {url} never reported ready")


def finished(url: str) -> int:
    return httpx.get(f"{url}/server_info", timeout=10).json()["finished_requests"]


def test_the_router_spreads_generate_requests_over_both_engines(cpu_engines):
    pytest.importorskip("sglang_router")
    router, url = start_router(cpu_engines)
    try:
        wait_ready(router, url)
        before = [finished(engine) for engine in cpu_engines]
        body = {"input_ids": [5, 6, 7], "return_logprob": True,
                "sampling_params": {"temperature": 0.5, "max_new_tokens": 5, "ignore_eos": True}}
        answers = [httpx.post(f"{url}/generate", json=body, timeout=60) for _ in range(6)]
        served = [finished(engine) - count for engine, count in zip(cpu_engines, before)]
        refused = httpx.post(f"{url}/generate", json={"input_ids": [5, 100000]}, timeout=60)
    finally:
        stop(router)
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    for answer in map(httpx.Response.json, answers):
        meta = answer["meta_info"]
        assert len(answer["output_ids"]) == meta["completion_tokens"] == 5
        assert meta["finish_reason"] == {"type": "length", "length": 5} and meta["weight_version"] == "default"
        assert [token for _, token, _ in meta["output_token_logprobs"]] == answer["output_ids"]
    assert min(served) >= 1 and sum(served) >= 6, served
    assert refused.status_code == 400 and "outside the vocabulary" in refused.text
