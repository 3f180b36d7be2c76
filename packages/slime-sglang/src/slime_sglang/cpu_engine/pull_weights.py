"""``/pull_weights``: bring this host's local checkpoint to a published weight version
(``--update-weight-mode delta``; the published form: `slime_core.weight_delta`).

Body (THUDM/slime's): ``source_dir`` (the shared folder of ``weight_v{N:06d}/`` versions),
``local_checkpoint_dir`` (this host's copy) and ``target_version``. The local copy remembers
its version and the stream's origin (`VERSION_FILE`); from there the versions up to the target are taken in turn: a
full version is copied as it is, a delta is applied on its base version (a copy that is on
another version refuses it). A copy with no version yet starts from the newest full version
at or below the target, or from the engine's own model directory (version 0).

Every tensor of a delta is decoded and checked against its checksum before any file is
written, so a corrupt delta (or a wrong base) fails naming the tensors and leaves the copy as
it was; an ``xor`` delta is then applied exactly once (the version file says it was), an
``overwrite`` one may be applied again. Engines that share a host (and so the folder) take
turns under a file lock; the first applies, the others find the copy at the version. The
trainer loads the copy afterwards with ``/update_weights_from_disk``.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
from pathlib import Path

from slime_core.weight_delta import (
    checksum,
    decode,
    delta_metadata,
    index_metadata,
    read_delta,
    tensor_regions,
    version_dir,
)
from slime_sglang.cpu_engine.engine import Engine
from slime_sglang.cpu_engine.request import BadRequest

VERSION_FILE = "pulled_version.json"
LOCK_FILE = ".pull_weights.lock"


async def pull_weights(engine: Engine, body: dict) -> dict:
    """The route's handler: the pull runs off the event loop (generation goes on meanwhile)."""
    source, local, target = body.get("source_dir"), body.get("local_checkpoint_dir"), body.get("target_version")
    if not isinstance(source, str) or not isinstance(local, str) or not isinstance(target, int) or target < 0:
        raise BadRequest("give source_dir and local_checkpoint_dir (folders) and target_version (an int >= 0)")
    try:
        await asyncio.to_thread(pull, Path(source), Path(local), target, Path(engine.model_path))
    except (OSError, ValueError, KeyError) as exc:
        return {"success": False, "message": f"pull of weight version {target} failed, nothing applied: {exc}"}
    return {"success": True, "message": f"{local} holds weight version {target}"}


def pull(source: Path, local: Path, target: int, base: Path) -> None:
    """Bring ``local`` to version ``target`` of ``source`` (``base``: version 0), under the host's lock."""
    local.mkdir(parents=True, exist_ok=True)
    with open(local / LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        origin = index_metadata(version_dir(source, target)).get("origin") if target else None
        held = local_version(local, origin)
        if held == target:
            return
        full = _newest_full(source, held, target)
        if full is not None or held is None:
            held = full or 0
            _copy_full(version_dir(source, held) if held else base, local, held, origin)
        for version in range(held + 1, target + 1):
            apply_delta(version_dir(source, version), local)


def local_version(local: Path, origin: str | None) -> int | None:
    """The version of stream ``origin`` that ``local`` holds; None for a copy never pulled, or
    pulled from another stream (another run)."""
    path = local / VERSION_FILE
    if not path.exists():
        return None
    held = json.loads(path.read_text())
    return int(held["version"]) if held.get("origin") == origin else None


def _newest_full(source: Path, held: int | None, target: int) -> int | None:
    """The newest full version in ``(held, target]`` (or ``[1, target]`` without ``held``); None if none."""
    floor = 0 if held is None or held > target else held
    for version in range(target, floor, -1):
        if delta_metadata(version_dir(source, version)) is None:
            return version
    return None


def _copy_full(folder: Path, local: Path, version: int, origin: str | None) -> None:
    """Replace the copy's weights by the full version in ``folder``."""
    for old in local.glob("*.safetensors"):
        old.unlink()
    for file in folder.glob("*.safetensors"):
        shutil.copyfile(file, local / (file.name + ".tmp"))
        os.replace(local / (file.name + ".tmp"), local / file.name)
    _set_version(local, version, origin)


def apply_delta(folder: Path, local: Path) -> None:
    """Apply the delta version in ``folder`` onto ``local``: every tensor decoded and verified
    first, then the changed files replaced; ``ValueError`` naming what failed otherwise."""
    import numpy as np

    metadata = delta_metadata(folder)
    if metadata is None:
        raise ValueError(f"{folder} is a full version, not a delta")
    held, base = local_version(local, metadata.get("origin")), int(metadata["base_version"])
    if held != base:
        raise ValueError(f"{folder.name} applies on version {base}, and {local} holds version {held}")
    files = {path: bytearray(path.read_bytes()) for path in local.glob("*.safetensors")}
    where = {name: (path, region) for path, data in files.items() for name, region in tensor_regions(data).items()}
    changed, mismatched = set(), []
    for name, (diff, wanted) in read_delta(folder).items():
        if name not in where:
            raise ValueError(f"{folder.name} changes {name}, which {local} does not hold")
        path, (start, end) = where[name]
        old = np.frombuffer(files[path], dtype=np.uint8)[start:end]
        try:
            new = decode(metadata["delta_encoding"], old, diff)
        except Exception:  # noqa: BLE001 - a corrupt diff (bad zstd frame, wrong size): reported as a mismatch
            new = None
        if new is None or checksum(metadata["checksum_format"], new) != wanted:
            mismatched.append(name)
            continue
        files[path][start:end] = new.tobytes()
        changed.add(path)
    if mismatched:
        raise ValueError(
            f"checksum mismatch in {folder.name} for {len(mismatched)} tensor(s): {', '.join(mismatched[:5])}; "
            "the published delta is corrupt or was made against other weights (restart from a full version)"
        )
    for path in changed:
        (path.parent / (path.name + ".tmp")).write_bytes(files[path])
        os.replace(path.parent / (path.name + ".tmp"), path)
    _set_version(local, int(metadata["version"]), metadata.get("origin"))


def _set_version(local: Path, version: int, origin: str | None) -> None:
    (local / (VERSION_FILE + ".tmp")).write_text(json.dumps({"version": f"{version:06d}", "origin": origin}))
    os.replace(local / (VERSION_FILE + ".tmp"), local / VERSION_FILE)
