"""A third-party plugin for the tests (loaded with ``-p router_test_plugin``): a ``tag``
middleware that stamps every answer with ``X-Test-Tag``, the way a user's own plugin would
add a router middleware."""

from slime_core import hookimpl


def tag_middleware(next_handler, config):
    async def tag(request):
        response = await next_handler(request)
        response.headers["x-test-tag"] = f"tagged {request.path}"
        return response

    return tag


@hookimpl
def slime_register_router_middlewares(register):
    register("tag", tag_middleware)
