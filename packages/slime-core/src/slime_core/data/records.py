"""Reading prompt records from JSONL and Parquet files, with file:line in every error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class DataError(ValueError):
    """A data file that cannot be used as given; the message names the file and line."""


def read_records(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(location, record)`` for every record; location is ``"file:line"`` or ``"file row N"``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file '{path}' does not exist; check --prompt-data")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        yield from _read_jsonl(path)
    elif suffix == ".parquet":
        yield from _read_parquet(path)
    else:
        raise DataError(
            f"{path}: unsupported data format '{suffix}'; use .jsonl (one JSON object per line) or .parquet"
        )


def _read_jsonl(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Lines are split on ``\\n`` and decoded one by one, so that bytes that are not UTF-8
    are reported at their line (a text-mode read raises ``UnicodeDecodeError`` for the
    whole file, naming only a byte offset)."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            where = f"{path}:{number}"
            line = _utf8(raw, where)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(
                    f"{where}: invalid JSON ({exc.msg} at column {exc.colno}); fix or remove this line"
                ) from None
            if not isinstance(record, dict):
                raise DataError(f"{where}: expected a JSON object per line, got {type(record).__name__}")
            yield where, record


def _utf8(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line); save the "
            "file as UTF-8 (e.g. iconv -f latin1 -t utf-8), or fix this line"
        ) from None


def _read_parquet(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise DataError(f"{path}: cannot read as Parquet ({exc})") from exc
    for row, record in enumerate(table.to_pylist()):
        yield f"{path} row {row}", record
