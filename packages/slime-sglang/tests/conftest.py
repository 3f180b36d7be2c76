"""Fixtures for the CPU engine tests: two real ``slime engine serve`` processes on the tiny
model, started together once per session (most tests use the first; the router test both).

Tests that change an engine's state (weights, pause, released memory) put it back in ``finally``.
"""

from __future__ import annotations

import httpx
import pytest


@pytest.fixture(scope="session")
def cpu_engines(tiny_model_dir, tmp_path_factory):
    """URLs of two CPU engines serving ``tiny_model_dir`` (context length 4096 so that long
    requests can run while others come and go; one thread each, as they share the cores)."""
    from slime_sglang.cpu_engine.launch import start_cpu_engine, stop, wait_healthy

    logs = tmp_path_factory.mktemp("cpu-engine-logs")
    started = [
        start_cpu_engine(
            tiny_model_dir, None, "--context-length", "4096", "--num-threads", "1", log_path=logs / f"engine{i}.log"
        )
        for i in range(2)
    ]
    try:
        for process, url in started:
            wait_healthy(process, url)
        yield [url for _, url in started]
    finally:
        stop(*(process for process, _ in started))


@pytest.fixture(scope="session")
def engine_url(cpu_engines) -> str:
    return cpu_engines[0]


@pytest.fixture(scope="session")
def other_model_dir(tmp_path_factory):
    """The same architecture as the tiny model, other random weights."""
    from slime_core.tools.tiny_models import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3-seed1"), seed=1)


@pytest.fixture
def restore_weights(cpu_engines, tiny_model_dir):
    """After the test, both engines serve the tiny model's weights again, as version "default"."""
    yield
    for url in cpu_engines:
        body = {"model_path": str(tiny_model_dir), "weight_version": "default"}
        response = httpx.post(f"{url}/update_weights_from_disk", json=body, timeout=60)
        assert response.json()["success"], response.text


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def reference_model(tiny_model_dir):
    """The served weights in plain transformers, for reference decodes and log-probs."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture
def one_torch_thread():
    """Reference computations in this process run on one thread: the engines already use the
    cores, and torch's threads slow down many times over when they have to share them."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
