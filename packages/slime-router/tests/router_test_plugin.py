"""A third-party plugin for the tests (loaded with ``-p router_test_plugin``): a ``tag``
middleware that stamps every answer with ``X-Test-Tag``, the way a user's own plugin would
add a router middleware, and with ``X-Test-Token-Sha256``: the SHA-256 of the run's token as
the front's config holds it ("none" without one)."""

import hashlib

from slime_core import hookimpl


def tag_middleware(next_handler, config):
    token = config.network.token
    token_hash = hashlib.sha256(token.encode()).hexdigest() if token else "none"

    async def tag(request):
        response = await next_handler(request)
        response.headers["x-test-tag"] = f"tagged {request.path}"
        response.headers["x-test-token-sha256"] = token_hash
        return response

    return tag


@hookimpl
def slime_register_router_middlewares(register):
    register("tag", tag_middleware)
