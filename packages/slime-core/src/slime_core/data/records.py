"""Reading prompt records from JSONL and Parquet files, with file:line in every error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator


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
        raise DataError(f"{path}: unsupported data format '{suffix}'; use .jsonl (one JSON object per line) or .parquet")


def _read_jsonl(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno}); fix or remove this line") from None
            if not isinstance(record, dict):
                raise DataError(f"{where}: expected a JSON object per line, got {type(record).__name__}")
            yield where, record


def _read_parquet(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise DataError(f"{path}: cannot read as Parquet ({exc})") from exc
    for row, record in enumerate(table.to_pylist()):
        yield f"{path} row {row}", record
