"""``slime engine serve --api-key``: the control endpoints take only calls with the key (a run
that spans nodes passes its token), generation and health stay open, slime's client sends it."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from slime_core.engine import EngineError
from slime_sglang.client import EngineClient

KEY = "run-token-123"


def test_control_endpoints_need_the_key_and_the_client_sends_it(tiny_model_dir):
    from slime_sglang.cpu_engine.engine import load_engine
    from slime_sglang.cpu_engine.server import create_app

    engine = load_engine(str(tiny_model_dir), 4)

    async def check():
        async with TestServer(create_app(engine, KEY)) as server, aiohttp.ClientSession() as http:
            url = str(server.make_url("")).rstrip("/")
            refused = await http.post(f"{url}/pause_generation", json={})
            assert refused.status == 401 and "--api-key" in (await refused.json())["error"]
            wrong = await http.post(f"{url}/update_weights_from_tensor", data=b"x",
                                    headers={"Authorization": "Bearer nope", "Content-Type": "application/octet-stream"})
            assert wrong.status == 401
            assert (await http.get(f"{url}/health")).status == 200
            body = {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2, "temperature": 0}}
            assert (await http.post(f"{url}/generate", json=body)).status == 200
            with pytest.raises(EngineError):
                await EngineClient(url).pause_generation()  # no key: refused
            keyed = EngineClient(url, api_key=KEY)
            await keyed.pause_generation()
            assert engine.scheduler.paused
            await keyed.continue_generation()
            await keyed.close()
            assert not engine.scheduler.paused

    asyncio.run(check())
