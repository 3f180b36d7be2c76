"""``path@[start:end]``: use a slice of a data file's records."""

from __future__ import annotations

import re

_SLICE = re.compile(r"^(?P<path>.+)@\[(?P<start>-?\d*):(?P<end>-?\d*)\]$")


def split_path_slice(spec: str) -> tuple[str, slice]:
    """``"data.jsonl@[10:20]"`` -> ``("data.jsonl", slice(10, 20))``; no suffix -> the whole file."""
    match = _SLICE.match(spec)
    if not match:
        if "@[" in spec:
            raise ValueError(
                f"'{spec}': a slice is written path@[start:end] with integer bounds, e.g. data.jsonl@[0:1000]"
            )
        return spec, slice(None)
    bound = lambda text: int(text) if text else None  # noqa: E731
    return match["path"], slice(bound(match["start"]), bound(match["end"]))
