"""Options as command-line flags for the servers slime starts (SGLang, sglang-router, the CPU engine).

A one-value option is written ``--name value``, as people write them, except where the value
starts with ``-`` (a random token can): argparse takes such a word for the next flag and refuses
the command line, so that one is written ``--name=value``, which it reads whatever the value is.
"""

from __future__ import annotations

from typing import Any

from slime_core.config.options import key_to_flag as flag


def as_flags(options: dict[str, Any]) -> list[str]:
    """``options`` as flags: True is a bare flag; False, None and [] are left out; a list or tuple
    is the flag followed by its items; anything else is ``--name value`` (``--name=value`` where
    the value starts with ``-``)."""
    argv: list[str] = []
    for key, value in options.items():
        if value is None or value is False or value == [] or value == ():
            continue
        if value is True:
            argv.append(flag(key))
        elif isinstance(value, (list, tuple)):
            argv += [flag(key), *map(str, value)]
        elif str(value).startswith("-"):
            argv.append(f"{flag(key)}={value}")
        else:
            argv += [flag(key), str(value)]
    return argv
