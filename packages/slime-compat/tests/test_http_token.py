"""``slime.utils.http_utils.post``/``get`` as a slime user's generate function calls them: to the
run's router they carry the run's token (which a run across nodes requires on every route),
to any other server none of ours; a header the caller gives wins."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from aiohttp import web
from aiohttp.test_utils import TestServer

from slime.utils.http_utils import get, post
from slime_compat.args import SlimeArgs
from slime_core.cluster.network import Network


def _echo_app() -> web.Application:
    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"authorization": request.headers.get("Authorization")})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo)
    return app


def test_the_run_s_router_gets_the_token_and_no_other_server_does():
    network = Network.for_nodes(2)

    async def check():
        async with TestServer(_echo_app()) as router, TestServer(_echo_app()) as elsewhere:
            router_url = str(router.make_url("")).rstrip("/")
            args = SlimeArgs(SimpleNamespace(network=network))
            args.set_router(router_url)  # what the rollout adapter does with the address of each call
            assert (args.sglang_router_ip, args.sglang_router_port) == (router.host, router.port)
            url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"
            assert (await post(url, {"input_ids": [1]}))["authorization"] == f"Bearer {network.token}"
            assert (await get(f"{router_url}/server_info"))["authorization"] == f"Bearer {network.token}"
            mine = await post(url, {}, headers={"Authorization": "Bearer user's own"})
            assert mine["authorization"] == "Bearer user's own"
            other = str(elsewhere.make_url("/score"))
            assert (await post(other, {"text": "x"}))["authorization"] is None

    asyncio.run(check())
