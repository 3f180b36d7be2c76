"""The router's front: an HTTP server, in its own process, that runs the middleware chain in
front of sglang-router.

``start_router`` runs it as ``python -m slime_router.front --config FILE --host H --port P``:
the file is the run's pickled ``Config`` (with ``sglang_router_ip`` / ``sglang_router_port``
naming the sglang-router behind it), without the run's token when it has one: that comes in
the environment (``SLIME_ROUTER_TOKEN``), so no file in the run directory holds it. Plugins
are loaded as in the driver: installed ones through their entry points, local ``-p`` modules
through ``SLIME_PLUGINS``.

Every request is read completely and handed to the chain; a middleware's ``HTTPError``
becomes its status and message, any other exception a 500 that names it (and is logged), so
a bad request never takes the front down.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import pickle
import sys

from aiohttp import web

from slime_core.network import LOOPBACK
from slime_router.handlers import Handler, HTTPError, Request, Response, error_response
from slime_router.launch import TOKEN_ENV

log = logging.getLogger("slime_router.front")
MAX_BODY_BYTES = 1 << 30


def create_app(handler: Handler) -> web.Application:
    """An aiohttp application that serves every path with ``handler``."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)

    async def serve(raw: web.Request) -> web.Response:
        request = Request(raw.method, raw.path, raw.query_string, {k.lower(): v for k, v in raw.headers.items()},
                          await raw.read())
        response = await _answer(handler, request)
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
        return error_response(500, f"slime-router's middleware chain failed on {request.method} {request.path}: "
                                   f"{type(exc).__name__}: {exc}")


def router_url(config) -> str:
    """The sglang-router behind the front (``--sglang-router-ip/--sglang-router-port``)."""
    return f"http://{config.sglang_router_ip}:{config.sglang_router_port}"


def build_handler(config, plugins):
    """The composed chain for ``config.router_middleware``, and the proxy to close at shutdown."""
    from slime_router.chain import compose
    from slime_router.proxy import Proxy

    proxy = Proxy(router_url(config))
    return compose(list(config.router_middleware or []), proxy, config, plugins), proxy


def load_config(path: str):
    """The pickled config at ``path``, with the run's token from the environment (`TOKEN_ENV`),
    which is taken out of it so that nothing this process starts inherits it."""
    with open(path, "rb") as file:
        config = pickle.load(file)
    token = os.environ.pop(TOKEN_ENV, None)
    if token:
        config.network = dataclasses.replace(config.network, token=token)
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slime_router.front", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="pickled slime Config")
    parser.add_argument("--host", default=LOOPBACK)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the retry middleware's health probes
    from slime_core.plugins import Plugins

    config = load_config(args.config)
    handler, proxy = build_handler(config, Plugins())
    app = create_app(handler)

    async def close_proxy(_app: web.Application) -> None:
        await proxy.close()

    app.on_cleanup.append(close_proxy)
    log.info("serving %s on http://%s:%s in front of %s", config.router_middleware, args.host, args.port, router_url(config))
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None, handler_cancellation=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
