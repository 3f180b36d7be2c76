"""Reading checkpoint files without running code from them: a checkpoint is something users
download, and a pickle can name any importable callable, which unpickling calls.

Every pickled checkpoint file the backends read goes through an allow-list; anything else is
refused before it runs, with the file and the type it names (`UnsafeCheckpointError`):

- files written with ``torch.save`` (a rank's extras: counters, RNG states, the LR scheduler's
  state; megatron's ``common.pt``): `load_torch_file`, ``torch.load(weights_only=True)`` (torch's
  allow-list: tensors, containers, numbers, strings);
- the ``.metadata`` of a torch.distributed.checkpoint (DCP) directory, which torch unpickles with
  plain ``pickle``: `load_dcp_metadata`, an unpickler that knows only DCP's metadata dataclasses,
  ``torch.Size``, dtypes, layouts and paths;
- the DCP items that are not tensors (an optimizer's hyper-parameters), which torch reads with
  ``torch.load(weights_only=False)``: read with ``weights_only=True``.

The last two happen inside torch's reader (``FileSystemReader.read_metadata``) and load planner
(``DefaultLoadPlanner.load_bytes``), which megatron-core also builds itself; `guarded_dcp_reads`
puts the allow-listed versions in their place for the process (once), and
`dcp_failures_raised` brings a refusal out of DCP's own ``CheckpointException``. Tensor data in
``.distcp`` files is read by torch with ``weights_only=True`` already.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from slime_core.checkpoint.directory import CheckpointError

#: modules of DCP whose dataclasses and enums a ``.metadata`` file is made of
_DCP_MODULES = (
    "torch.distributed.checkpoint.metadata",
    "torch.distributed.checkpoint.planner",
    "torch.distributed.checkpoint.filesystem",
)
#: plain classes a ``.metadata`` file may name besides those (paths: ``StorageMeta.checkpoint_id``)
_PLAIN = {
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "complex"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"),
    ("pathlib", "Path"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
}


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint file names a type outside the allow-list; nothing of it was run."""

    @classmethod
    def naming(cls, where: str | Path, names: str) -> UnsafeCheckpointError:
        """The refusal of the file at ``where``, which names ``names`` (one message argument, so
        that Ray can carry it from a train rank to the driver)."""
        return cls(
            f"{where}: refused to load it: it names {names}, outside the allow-list of what a checkpoint "
            "holds, which loading would call (any code could run);\n  use checkpoints only from sources you "
            "trust: delete this one, or write it again with slime (--save)"
        )


def load_torch_file(source: str | Path | IO[bytes], where: str | Path | None = None) -> Any:
    """What ``torch.save`` wrote to ``source`` (a path or a file object), loaded with torch's
    allow-list (``weights_only=True``) on the CPU; ``where`` names it in the error (default: the path)."""
    import torch

    try:
        return torch.load(source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UnsafeCheckpointError.naming(where or source, _unsafe_names(source) or str(exc).splitlines()[0]) from None


def _unsafe_names(source) -> str:
    """The globals outside torch's allow-list that ``source`` names, found without loading it."""
    import torch

    if hasattr(source, "seek"):
        source.seek(0)
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(source)
    except Exception:  # noqa: BLE001 - only the message's detail depends on it
        return ""
    return ", ".join(sorted(names))


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles a DCP ``.metadata`` file; any other global is an `UnsafeCheckpointError`."""

    def __init__(self, file: IO[bytes], where: str | Path):
        super().__init__(file)
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        if _allowed(module, name):
            return super().find_class(module, name)
        raise UnsafeCheckpointError.naming(self.where, f"{module}.{name}")


def _allowed(module: str, name: str) -> bool:
    if (module, name) in _PLAIN:
        return True
    import torch

    if module == "torch":
        return isinstance(getattr(torch, name, None), (torch.dtype, torch.layout, torch.memory_format))
    if module not in _DCP_MODULES:
        return False
    import importlib

    found = getattr(importlib.import_module(module), name, None)
    return isinstance(found, type) and (dataclasses.is_dataclass(found) or issubclass(found, enum.Enum))


def load_dcp_metadata(file: IO[bytes], where: str | Path):
    """The DCP ``Metadata`` pickled in ``file`` (the ``.metadata`` at ``where``), allow-listed."""
    return _MetadataUnpickler(file, where).load()


def guarded_dcp_reads() -> None:
    """Make torch's DCP reader and load planner in this process read with the allow-lists (see
    the module docstring); idempotent. Called by the backends before they read a checkpoint."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    if getattr(FileSystemReader.read_metadata, "allow_listed", False):
        return
    FileSystemReader.read_metadata = _read_metadata
    DefaultLoadPlanner.load_bytes = _load_bytes


def _read_metadata(self, *args, **kwargs):
    """``FileSystemReader.read_metadata`` (torch 2.13) with the allow-listed unpickler."""
    from torch.distributed.checkpoint.metadata import StorageMeta

    path = self._get_metadata_path(kwargs.get("rank"))
    with self.fs.create_stream(path, "rb") as file:
        metadata = load_dcp_metadata(file, path)
    if getattr(metadata, "storage_meta", None) is None:
        metadata.storage_meta = StorageMeta()
    metadata.storage_meta.load_id = self.load_id
    return metadata


def _load_bytes(self, read_item, value: io.BytesIO) -> None:
    """``DefaultLoadPlanner.load_bytes`` with ``weights_only=True``."""
    from torch.distributed.checkpoint._traverse import set_element

    fqn = read_item.dest_index.fqn
    stored = self.metadata.storage_data[read_item.storage_index].relative_path if self.metadata else "?"
    loaded = load_torch_file(value, where=f"{stored} (its item {fqn})")
    if self.flatten_state_dict:
        set_element(self.original_state_dict, self.mappings[fqn], loaded)
    else:
        self.state_dict[fqn] = loaded


_read_metadata.allow_listed = True


@contextmanager
def dcp_failures_raised(what: str) -> Iterator[None]:
    """Around a DCP load or save (ours or megatron-core's; ``what`` says which, for the error):
    a failure inside it comes out as an ``Exception`` Ray reports, not as DCP's
    ``CheckpointException``, a ``BaseException`` gathering each rank's failure: a refusal as
    itself, anything else (a write the disk refused) as a `CheckpointError` naming the first."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        yield
    except CheckpointException as exc:
        failures = [error for error, _ in exc.failures.values()]
        refused = [error for error in failures if isinstance(error, UnsafeCheckpointError)]
        if refused:
            raise refused[0] from None
        first = _described(failures[0]) if failures else str(exc)
        raise CheckpointError(f"{what} failed on rank(s) {sorted(exc.failures)}: {first}") from None


def _described(error: BaseException) -> str:
    """``error`` as the user should read it: the operating system's error behind it if there is
    one; torch's serializer reports a write the disk refused (full, or over a size limit) only
    as "unexpected pos", which says the file came out shorter than written."""
    seen = error
    while seen is not None:
        if isinstance(seen, OSError):
            return f"{type(seen).__name__}: {seen}"
        seen = seen.__cause__ or seen.__context__
    text = f"{type(error).__name__}: {error}"
    if "unexpected pos" in text:
        return f"a file came out shorter than written: the disk is full or refused the write ({text})"
    return text
