"""Loading and calling the user functions slime's ``--*-path`` flags name."""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any


@functools.cache
def load_function(path: str) -> Callable:
    """The object at ``package.module.name`` (slime's form) or ``package.module:name``."""
    module_name, sep, attribute = path.partition(":") if ":" in path else path.rpartition(".")
    if not sep or not module_name or not attribute:
        raise ValueError(f"'{path}' is not a dotted path to a function; write it as package.module.function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(
            f"cannot import '{module_name}' for '{path}' ({exc}); check the name and that its folder is on PYTHONPATH"
        ) from exc
    try:
        return functools.reduce(getattr, attribute.split("."), module)
    except AttributeError:
        raise AttributeError(f"module '{module_name}' has no '{attribute}' (from '{path}')") from None


async def call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, awaited when ``fn`` is async (slime accepts both for most hooks)."""
    result = fn(*args, **kwargs)
    return await result if inspect.isawaitable(result) else result


def accepts(fn: Callable, parameter: str) -> bool:
    """Whether ``fn`` names ``parameter`` (slime passes ``evaluation=`` to a generate function only then)."""
    return parameter in inspect.signature(fn).parameters
