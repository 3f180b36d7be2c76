"""Composing the middlewares named by ``--router-middleware`` into one handler, once.

The first name is the outermost middleware: a request passes through the middlewares in the
order they are listed, then reaches the innermost handler (the proxy to sglang-router); the
response travels back in the reverse order. So ``--router-middleware metrics sessions retry``
measures what clients see, turns OpenAI requests into ``/generate`` calls, and retries those.
"""

from __future__ import annotations

from typing import Any

from slime_router.handlers import Handler

KIND = "router_middlewares"


class ChainError(ValueError):
    """The middleware list cannot be composed."""


def compose(names: list[str], innermost: Handler, config: Any, plugins) -> Handler:
    """Wrap ``innermost`` in the registered middlewares ``names`` (outermost first)."""
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ChainError(f"--router-middleware lists {', '.join(repeated)} more than once; list each middleware once")
    registry = plugins.registry(KIND)
    handler = innermost
    for name in reversed(names):
        wrapped = registry.get(name)(handler, config)
        if not callable(wrapped):
            entry = registry.entry(name)
            raise ChainError(
                f"router middleware '{name}' of plugin '{entry.plugin}' ({entry.distribution}) returned "
                f"{type(wrapped).__name__}, not a handler; its factory must return `async def handler(request) -> "
                "Response`"
            )
        handler = wrapped
    return handler


def check_names(names: list[str], plugins) -> None:
    """Raise the registry's error (with a suggestion) for a name no plugin registers."""
    registry = plugins.registry(KIND)
    for name in names:
        registry.entry(name)
