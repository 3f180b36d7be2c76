"""The published form of delta weight sync (``--update-weight-mode delta``), shared by the
trainer that writes it (`slime_core.loop.delta_sync`) and the engines that apply it (the CPU
engine's ``/pull_weights``: ``slime_sglang.cpu_engine.pull_weights``).

Each sync is a version directory ``weight_v{N:06d}/`` under one shared folder. A version is
either *full* (an ordinary Hugging Face directory of safetensors files: copied as it is) or a
*delta* against version N-1: safetensors files that hold, per changed tensor, its zstd-compressed
diff as a flat ``uint8`` array, with the checksum of the tensor's new bytes in the file's
metadata, and a ``model.safetensors.index.json`` whose metadata names the version, its base,
the encoding and the checksum algorithm (the layout of THUDM/slime's, so its patched SGLang's
``/pull_weights`` reads it too). slime's own publisher also names the stream's ``origin`` (in
the index of every version, full or delta), so that an engine host's local copy left by another
run is never taken for a version of this one. Both encodings are byte-level, blind to the dtype:

- ``xor``: ``new ^ old``; unchanged bytes are zeros that compress away; applying it twice
  reverts it, so it must be applied exactly once, on its base;
- ``overwrite``: the count of changed bytes (``<u4``), their positions (``<u4`` each), then
  their new values; larger, but applying it again changes nothing (idempotent).
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

ENCODINGS = ("xor", "overwrite")
CHECKSUMS = ("xxh3-128", "blake3", "adler32")
INDEX = "model.safetensors.index.json"
COMPRESSION = "zstd"
ZSTD_LEVEL = 1  # THUDM/slime's choice: the fastest level already removes the unchanged bytes


def version_dir(source_dir: str | Path, version: int) -> Path:
    """The directory of published ``version`` under ``source_dir``."""
    return Path(source_dir) / f"weight_v{version:06d}"


def checksum(algorithm: str, data) -> str:
    """The hex digest of ``data`` (bytes or a ``uint8`` array) by ``algorithm`` (one of `CHECKSUMS`)."""
    if algorithm == "xxh3-128":
        import xxhash

        return xxhash.xxh3_128_hexdigest(data)
    if algorithm == "blake3":
        import blake3

        return blake3.blake3(bytes(data)).hexdigest()
    if algorithm == "adler32":
        return f"{zlib.adler32(data):08x}"
    raise ValueError(f"unknown checksum algorithm {algorithm!r}; pick one of {', '.join(CHECKSUMS)}")


def encode(encoding: str, old: np.ndarray, new: np.ndarray) -> np.ndarray | None:
    """The compressed diff turning ``old`` into ``new`` (flat ``uint8`` arrays of one size), or
    None when they are equal."""
    import numpy as np
    import zstandard

    if encoding == "xor":
        diff = np.bitwise_xor(old, new)
        if not diff.any():
            return None
    else:
        positions = np.flatnonzero(old != new).astype("<u4")
        if positions.size == 0:
            return None
        count = np.array([positions.size], "<u4")
        diff = np.concatenate([count.view(np.uint8), positions.view(np.uint8), new[positions]])
    return np.frombuffer(zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(diff.tobytes()), dtype=np.uint8)


def decode(encoding: str, old: np.ndarray, compressed: np.ndarray) -> np.ndarray:
    """The new bytes of a tensor whose bytes were ``old``, from its compressed diff (a new array:
    ``old`` is left as it is, so a version is verified before anything is written)."""
    import numpy as np
    import zstandard

    diff = np.frombuffer(zstandard.ZstdDecompressor().decompress(compressed.tobytes()), dtype=np.uint8)
    if encoding == "xor":
        if diff.size != old.size:
            raise ValueError(f"xor diff of {diff.size} bytes for a tensor of {old.size}")
        return np.bitwise_xor(old, diff)
    count = int(diff[:4].view("<u4")[0])
    positions = diff[4 : 4 + 4 * count].view("<u4")
    new = old.copy()
    new[positions] = diff[4 + 4 * count :]
    return new


def write_index(folder: Path, metadata: dict, weight_map: dict[str, str]) -> None:
    """Write a version's index: its ``metadata`` and which file holds each tensor."""
    (folder / INDEX).write_text(json.dumps({"metadata": metadata, "weight_map": weight_map}))


def write_delta(folder: Path, version: int, encoding: str, algorithm: str, files: list[dict], origin: str) -> None:
    """Write delta ``version`` into ``folder``: one safetensors file per entry of ``files``
    (``{name: (compressed diff, checksum of the new bytes)}``), then the index (last, so a
    reader that sees the index sees every file)."""
    from safetensors.numpy import save

    folder.mkdir(parents=True, exist_ok=True)
    weight_map = {}
    for i, entries in enumerate(files):
        file = f"model-{i:05d}-of-{len(files):05d}.safetensors"
        data = save({name: diff for name, (diff, _) in entries.items()}, {n: c for n, (_, c) in entries.items()})
        (folder / file).write_bytes(data)
        weight_map.update({name: file for name in entries})
    metadata = {
        "version": f"{version:06d}",
        "base_version": f"{version - 1:06d}",
        "delta_encoding": encoding,
        "compression_format": COMPRESSION,
        "checksum_format": algorithm,
        "origin": origin,
    }
    write_index(folder, metadata, weight_map)


def index_metadata(folder: Path) -> dict:
    """The metadata of a published version's index (empty for a full version without one)."""
    if not folder.is_dir():
        raise FileNotFoundError(f"published weight version {folder} is missing")
    index = folder / INDEX
    return json.loads(index.read_text()).get("metadata", {}) if index.exists() else {}


def delta_metadata(folder: Path) -> dict | None:
    """The delta metadata of a published version, or None for a full version."""
    metadata = index_metadata(folder)
    return metadata if "delta_encoding" in metadata else None


def read_delta(folder: Path) -> dict[str, tuple[np.ndarray, str]]:
    """Every tensor of delta version ``folder``: ``{name: (compressed diff, wanted checksum)}``."""
    from safetensors.numpy import load

    out = {}
    for file in sorted(folder.glob("*.safetensors")):
        data = file.read_bytes()
        wanted = header(data).get("__metadata__", {})
        out.update({name: (diff, wanted.get(name, "")) for name, diff in load(data).items()})
    return out


def header(data: bytes) -> dict:
    """The JSON header of a safetensors file's bytes."""
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + length])


def tensor_regions(data: bytes) -> dict[str, tuple[int, int]]:
    """Each tensor's ``(start, end)`` byte offsets in a safetensors file's bytes."""
    (length,) = struct.unpack("<Q", data[:8])
    return {
        name: (8 + length + info["data_offsets"][0], 8 + length + info["data_offsets"][1])
        for name, info in header(data).items()
        if name != "__metadata__"
    }
