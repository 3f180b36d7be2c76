"""The CPU engine's keys, as SGLang's: the admin key (every run's token) guards the control
endpoints and leaves generation open; the API key (a run across nodes) guards every route
but ``/health*``; slime's client sends the key; ``slime engine serve`` takes the keys from its
environment, so they are on no command line."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import aiohttp
import httpx
import pytest
from aiohttp.test_utils import TestServer

from slime_core.engine import EngineError
from slime_sglang.client import EngineClient

KEY = "run-token-123"
GENERATE = {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2, "temperature": 0}}


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from slime_sglang.cpu_engine.engine import load_engine

    return load_engine(str(tiny_model_dir), 4)


def serve(engine, check, **keys):
    from slime_sglang.cpu_engine.server import create_app

    async def run():
        async with TestServer(create_app(engine, **keys)) as server, aiohttp.ClientSession() as http:
            await check(str(server.make_url("")).rstrip("/"), http)

    asyncio.run(run())


def test_the_admin_key_guards_the_control_endpoints_and_the_client_sends_it(engine):
    async def check(url, http):
        refused = await http.post(f"{url}/pause_generation", json={})
        assert refused.status == 401 and "--admin-api-key" in (await refused.json())["error"]
        wrong = await http.post(
            f"{url}/update_weights_from_tensor",
            data=b"x",
            headers={"Authorization": "Bearer nope", "Content-Type": "application/octet-stream"},
        )
        assert wrong.status == 401
        for path in ("/flush_cache", "/release_memory_occupation", "/update_weights_from_disk", "/abort_request"):
            assert (await http.post(f"{url}{path}", json={})).status == 401, path
        assert (await http.get(f"{url}/health")).status == 200
        assert (await http.post(f"{url}/generate", json=GENERATE)).status == 200
        with pytest.raises(EngineError):
            await EngineClient(url).pause_generation()  # no key: refused
        keyed = EngineClient(url, api_key=KEY)
        await keyed.pause_generation()
        assert engine.scheduler.paused
        await keyed.continue_generation()
        await keyed.close()
        assert not engine.scheduler.paused

    serve(engine, check, admin_api_key=KEY)


def test_the_api_key_guards_every_route_but_health(engine):
    async def check(url, http):
        assert (await http.post(f"{url}/generate", json=GENERATE)).status == 401
        assert (await http.get(f"{url}/server_info")).status == 401
        assert (await http.get(f"{url}/health")).status == 200
        keyed = EngineClient(url, api_key=KEY)
        assert len((await keyed.generate([5, 6], _sampling())).output_ids) == 2
        assert (await keyed.server_info())["weight_version"] is not None
        await keyed.close()

    serve(engine, check, api_key=KEY)


def _sampling():
    from slime_core.engine import SamplingParams

    return SamplingParams(max_new_tokens=2, temperature=0)


def test_serve_takes_its_keys_from_the_environment_not_its_command_line(tiny_model_dir, tmp_path):
    from slime_core.cluster.network import Network
    from slime_core.cluster.ports import free_port
    from slime_core.testing import processes_running
    from slime_sglang.cpu_engine.launch import stop, wait_healthy

    network = Network.for_nodes(2)  # both keys
    port = free_port()
    slime = os.path.join(os.path.dirname(sys.executable), "slime")
    process = subprocess.Popen(
        [slime, "engine", "serve", "--model", str(tiny_model_dir), "--port", str(port), "--num-threads", "1"],
        env={**os.environ, **network.key_env()},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(process, url)
        refused = httpx.post(f"{url}/generate", json=GENERATE, timeout=30)
        answered = httpx.post(f"{url}/generate", json=GENERATE, headers=network.auth_header(), timeout=30)
        on_command_lines = processes_running(network.token)
    finally:
        stop(process)
    assert refused.status_code == 401 and answered.status_code == 200, (refused.text, answered.text)
    assert on_command_lines == []
