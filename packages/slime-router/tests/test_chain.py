"""Registering and composing middlewares: order, errors, and a third party's middleware in the front."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from slime_core import hookimpl
from slime_core.plugins import Plugins
from slime_router.chain import ChainError, compose
from slime_router.handlers import Request, Response


def recorder(name: str, calls: list[str]):
    def factory(next_handler, config):
        calls.append(f"built {name}")

        async def handler(request: Request) -> Response:
            calls.append(f"{name} in")
            response = await next_handler(request)
            calls.append(f"{name} out")
            return response

        return handler

    return factory


class OrderPlugin:
    def __init__(self, calls: list[str]):
        self.calls = calls

    @hookimpl
    def slime_register_router_middlewares(self, register):
        register("first", recorder("first", self.calls))
        register("second", recorder("second", self.calls))
        register("broken", lambda next_handler, config: "not a handler")


@pytest.fixture
def plugins():
    calls: list[str] = []
    loaded = Plugins(autoload=False)
    loaded.register_object("order-test", OrderPlugin(calls))
    try:
        yield loaded, calls
    finally:
        loaded.unregister("order-test")


def test_the_first_listed_middleware_is_the_outermost(plugins):
    loaded, calls = plugins

    async def innermost(request: Request) -> Response:
        calls.append("router")
        return Response(200, b"ok")

    handler = compose(["first", "second"], innermost, config=None, plugins=loaded)
    assert calls == ["built second", "built first"]  # composed once, inside out
    calls.clear()
    for _ in range(2):
        assert asyncio.run(handler(Request("POST", "/generate"))).body == b"ok"
    assert calls == ["first in", "second in", "router", "second out", "first out"] * 2


def test_composition_errors_name_the_problem(plugins):
    loaded, _ = plugins

    async def innermost(request):
        return Response(200)

    with pytest.raises(ChainError, match="lists first more than once"):
        compose(["first", "second", "first"], innermost, None, loaded)
    with pytest.raises(ChainError, match="'broken' of plugin 'order-test' .* returned str, not a handler"):
        compose(["broken"], innermost, None, loaded)


def test_the_builtin_middlewares_are_registered_by_the_router_plugin():
    registry = Plugins().registry("router_middlewares")
    assert {name: registry.entry(name).plugin for name in ("sessions", "metrics", "retry")} == {
        "sessions": "router",
        "metrics": "router",
        "retry": "router",
    }
    assert all(callable(registry.get(name)) for name in ("sessions", "metrics", "retry"))


@pytest.mark.integration
def test_a_third_party_middleware_runs_in_the_front(router):
    answer = httpx.post(
        f"{router.url}/generate", json={"input_ids": [5], "sampling_params": {"max_new_tokens": 1}}, timeout=60
    )
    assert answer.status_code == 200 and answer.headers["x-test-tag"] == "tagged /generate"
