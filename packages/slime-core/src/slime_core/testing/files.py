"""What a run left on disk, for tests that a secret never reaches a file."""

from __future__ import annotations

from pathlib import Path


def files_holding(folder: Path, text: str) -> list[Path]:
    """The files under ``folder`` whose bytes contain ``text`` (a secret that must not be there)."""
    needle = text.encode()
    return [path for path in Path(folder).rglob("*") if path.is_file() and needle in path.read_bytes()]
