"""The retry middleware when an engine is killed in the middle of a request."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest

from slime_router.launch import start_router

pytestmark = pytest.mark.integration
ONE_TOKEN = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 1}}
LONG = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 1500, "ignore_eos": True}, "return_logprob": True}


def test_a_request_on_a_killed_engine_is_retried_on_the_other(engine_processes, make_run_config, served, tmp_path):
    survivor, (victim_process, victim) = engine_processes[0][1], engine_processes[2]
    config = make_run_config(router_middleware=["retry"], output_dir=str(tmp_path))
    with start_router(config, [survivor, victim]) as router:
        session = _session_routed_to(victim, router.url, served)
        answer, before = {}, served([survivor])[0]
        request = threading.Thread(
            target=lambda: answer.update(
                response=httpx.post(f"{router.url}/generate", json=LONG, headers={"X-Session-Id": session}, timeout=120)
            )
        )
        request.start()
        _wait_running(victim)
        os.kill(victim_process.pid, signal.SIGKILL)  # mid-request
        request.join()
        response = answer["response"]
        assert response.status_code == 200, response.text
        assert response.headers["x-slime-retries"] == "1"
        assert response.json()["meta_info"]["completion_tokens"] == 1500
        assert served([survivor])[0] == before + 1
        assert router.workers() == [survivor]  # the dead engine is dropped
        # later requests of the session go to the survivor without a retry
        again = httpx.post(f"{router.url}/generate", json=ONE_TOKEN, headers={"X-Session-Id": session}, timeout=60)
        assert again.status_code == 200 and "x-slime-retries" not in again.headers
    log = (tmp_path / "router" / "front.log").read_text()
    assert "retry: POST /generate failed (attempt 1 of 3)" in log
    assert f"retry: engine {victim} does not answer GET /health; removed it from sglang-router" in log


def _session_routed_to(engine: str, router_url: str, served) -> str:
    """A session key that sglang-router sends to ``engine``."""
    for i in range(32):
        before = served([engine])[0]
        httpx.post(
            f"{router_url}/generate", json=ONE_TOKEN, headers={"X-Session-Id": f"key-{i}"}, timeout=60
        ).raise_for_status()
        if served([engine])[0] > before:
            return f"key-{i}"
    raise AssertionError(f"no session of 32 was routed to {engine}")


def _wait_running(engine: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while httpx.get(f"{engine}/server_info", timeout=5).json()["running_requests"] == 0:
        assert time.monotonic() < deadline, "the long request never started on the engine"
        time.sleep(0.01)
