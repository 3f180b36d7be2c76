"""slime.utils.misc: `load_function` (``package.module.function``)."""

from slime_compat.functions import load_function

__all__ = ["load_function"]
