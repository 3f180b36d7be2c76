"""Fixtures for the router tests: real CPU engines, the real sglang-router, the real front.

Three ``slime engine serve`` processes on the tiny model start together once per session: two
serve every test, the third is killed by the retry test. The ``router`` fixture is one
``start_router`` with ``metrics tag sessions retry`` in front of the two (``tag`` comes from
``router_test_plugin``, loaded as a local ``-p`` plugin, to prove that a third party's
middleware reaches the front process).
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

TESTS = Path(__file__).parent
CHAIN = ["metrics", "tag", "sessions", "retry"]


@pytest.fixture(scope="session")
def engine_processes(tiny_model_dir, tmp_path_factory):
    """Three CPU engines as (process, url); one thread each, as they share the cores."""
    from slime_sglang.cpu_engine.launch import start_cpu_engine, stop, wait_healthy

    logs = tmp_path_factory.mktemp("engine-logs")
    started = [
        start_cpu_engine(
            tiny_model_dir, None, "--context-length", "4096", "--num-threads", "1", log_path=logs / f"engine{i}.log"
        )
        for i in range(3)
    ]
    try:
        for process, url in started:
            wait_healthy(process, url)
        yield started
    finally:
        stop(*(process for process, _ in started if process.poll() is None))


@pytest.fixture(scope="session")
def engines(engine_processes) -> list[str]:
    """URLs of the two engines every test may use (and must leave running)."""
    return [url for _, url in engine_processes[:2]]


@pytest.fixture(scope="session")
def make_run_config(tiny_model_dir, tmp_path_factory):
    """``make_run_config(**options)``: a resolved run config on the tiny model, as ``slime run`` builds it."""
    from slime_core.testing import make_config

    data = tmp_path_factory.mktemp("data") / "prompts.jsonl"
    data.write_text('{"prompt": "1+1="}\n')
    return lambda hf_checkpoint=tiny_model_dir, **options: make_config(
        data, hf_checkpoint, rollout_batch_size=1, **options
    )


@pytest.fixture(scope="session")
def test_plugins():
    """The installed plugins plus ``router_test_plugin``, as ``slime -p router_test_plugin`` loads them
    (its folder is on PYTHONPATH, so the front process finds it too)."""
    from slime_core.plugins import Plugins

    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(TESTS))
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
        yield Plugins(["router_test_plugin"])


@pytest.fixture(scope="session")
def router(engines, make_run_config, test_plugins, tmp_path_factory):
    """One router for the session: sglang-router (slime's default: manual policy) and the front with `CHAIN`."""
    from slime_router.launch import start_router

    config = make_run_config(router_middleware=CHAIN, output_dir=str(tmp_path_factory.mktemp("run")))
    handle = start_router(config, engines, test_plugins)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="session")
def served():
    """``served(urls)``: how many requests each engine has answered so far."""
    return lambda urls: [httpx.get(f"{url}/server_info", timeout=10).json()["finished_requests"] for url in urls]
