"""The router's front: an HTTP server, in its own process, that runs the middleware chain in
front of sglang-router.

``start_router`` runs it as ``python -m slime_router.front --config FILE --host H --port P``:
the file is the run's pickled ``Config`` (with ``sglang_router_ip`` / ``sglang_router_port``
naming the sglang-router behind it), without the run's token: that comes in the environment
(``slime_core.cluster.network.take_keys``), so no file in the run directory and no command line holds
it. Plugins are loaded as in the driver: installed ones through their entry points, local
``-p`` modules through ``SLIME_PLUGINS``.

The keys guard the front as SGLang's guard an engine (`refusal`): with the API key (a run
across nodes) every path but ``/health*`` wants it, and the proxy then sends it on to
sglang-router with every request, the middlewares' own (the ``sessions`` middleware's
``/generate``) included; with the admin key alone (a run on one node) every path but the
agent-facing ones (`OPEN_PATHS`: generation, OpenAI's API, sessions, info) wants it: the
router's worker list, the engines' control endpoints, a middleware's own routes.

Every request is read completely and handed to the chain; a middleware's ``HTTPError``
becomes its status and message, any other exception a 500 that names it (and is logged), so
a bad request never takes the front down.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import pickle
import sys
from typing import TYPE_CHECKING

from aiohttp import web

from slime_core.cluster.network import LOOPBACK, bearer_matches, take_keys
from slime_router.handlers import Handler, HTTPError, Request, Response, error_response

if TYPE_CHECKING:
    from slime_core.config import Config

log = logging.getLogger("slime_router.front")
MAX_BODY_BYTES = 1 << 30
#: The path prefixes that the admin key alone leaves open: what agents and rollouts call.
OPEN_PATHS = (
    "/health",
    "/generate",
    "/v1/",
    "/sessions/",
    "/model_info",
    "/get_model_info",
    "/server_info",
    "/get_server_info",
)


def create_app(handler: Handler, api_key: str | None = None, admin_key: str | None = None) -> web.Application:
    """An aiohttp application that serves every path with ``handler``, behind the keys (`refusal`)."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)

    async def serve(raw: web.Request) -> web.Response:
        request = Request(
            raw.method, raw.path, raw.query_string, {k.lower(): v for k, v in raw.headers.items()}, await raw.read()
        )
        response = refusal(request, api_key, admin_key) or await _answer(handler, request)
        return web.Response(status=response.status, body=response.body, headers=response.headers)

    app.router.add_route("*", "/{tail:.*}", serve)
    return app


async def _answer(handler: Handler, request: Request) -> Response:
    try:
        return await handler(request)
    except HTTPError as exc:
        return error_response(exc.status, exc.message)
    except Exception as exc:
        log.exception("%s %s failed in the middleware chain", request.method, request.path)
        return error_response(
            500,
            f"slime-router's middleware chain failed on {request.method} {request.path}: {type(exc).__name__}: {exc}",
        )


def refusal(request: Request, api_key: str | None, admin_key: str | None) -> Response | None:
    """The 401 for a request without the key its path wants (see the module docstring), or None."""
    if request.path.startswith("/health"):
        return None
    key = api_key or (admin_key if not request.path.startswith(OPEN_PATHS) else None)
    if key is None or bearer_matches(request.headers.get("authorization"), key):
        return None
    return error_response(
        401,
        f"{request.path} needs the run's token: send 'Authorization: Bearer TOKEN' (slime's "
        "clients do; a user's function finds it in config.network.token)",
    )


def router_url(config: Config) -> str:
    """The sglang-router behind the front (``--sglang-router-ip/--sglang-router-port``)."""
    return f"http://{config.sglang_router_ip}:{config.sglang_router_port}"


def build_handler(config: Config, plugins, api_key: str | None = None):
    """The composed chain for ``config.router_middleware``, and the proxy to close at shutdown;
    ``api_key``: the key the proxy sends sglang-router with every request (see the module docstring)."""
    from slime_router.chain import compose
    from slime_router.proxy import Proxy

    proxy = Proxy(router_url(config), api_key)
    return compose(list(config.router_middleware or []), proxy, config, plugins), proxy


def load_config(path: str, token: str | None):
    """The pickled config at ``path``, with the run's ``token`` (for the middlewares' own calls)."""
    with open(path, "rb") as file:
        config = pickle.load(file)
    return config.replace(network=dataclasses.replace(config.network, token=token)) if token else config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slime_router.front", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="pickled slime Config")
    parser.add_argument("--host", default=LOOPBACK)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the retry middleware's health probes
    from slime_core.plugins import Plugins

    api_key, admin_key = take_keys()  # out of the environment, so that nothing started here inherits them
    config = load_config(args.config, admin_key or api_key)
    handler, proxy = build_handler(config, Plugins(), api_key)
    app = create_app(handler, api_key, admin_key)

    async def close_proxy(_app: web.Application) -> None:
        await proxy.close()

    app.on_cleanup.append(close_proxy)
    log.info(
        "serving %s on http://%s:%s in front of %s", config.router_middleware, args.host, args.port, router_url(config)
    )
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None, handler_cancellation=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
