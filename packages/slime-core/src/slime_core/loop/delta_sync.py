"""`DeltaPublisher`: the trainer's side of ``--update-weight-mode delta``.

It keeps a snapshot of the last published version (the bytes of every exported tensor) and
publishes each sync as a version directory (`slime_core.weight_delta`) under the run's
``weights/`` folder. The first sync, the one after `reset` and the one after a version the
engines did not `confirm` (a failed pull or load leaves them on an older version, and a delta
applies only on the version before it) are full versions: the exported buckets as they are, so
the engines' local copies start from them, whatever the dtype of the checkpoint they were started
from. Every other one holds the per-tensor diffs against the snapshot. The engines pull the
version into their hosts' local checkpoints (verified per tensor) and load those; `confirm`
records that and deletes the versions before it.

THUDM/slime seeds the snapshot from ``--hf-checkpoint`` and publishes only deltas; here the
first sync is full, since the trainer may export another dtype than the checkpoint holds.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from slime_core.weight_delta import checksum, encode, version_dir, write_delta, write_index

if TYPE_CHECKING:
    import numpy as np

    from slime_core.rank.weight_bucket import WeightBucket


class DeltaPublisher:
    """Publishes versions 1, 2, ... under ``source_dir``; ``encoding``: ``xor`` or ``overwrite``,
    ``algorithm``: the per-tensor checksum (`slime_core.weight_delta.CHECKSUMS`)."""

    def __init__(self, source_dir: Path, encoding: str, algorithm: str):
        self.source_dir, self.encoding, self.algorithm = source_dir, encoding, algorithm
        self.version = 0
        self.snapshot: dict[str, np.ndarray] = {}  # tensor name -> its bytes in the last published version
        self.confirmed = 0  # the last version every engine holds (`confirm`)
        self.full_bytes = 0  # bytes of the last sync's tensors: what a full sync would move
        self.origin = ""  # names the stream of versions since the last full one

    def reset(self) -> None:
        """Forget the snapshot: the next version is full (for an engine that starts afresh)."""
        self.snapshot = {}

    def publish(self, buckets: Iterable[WeightBucket]) -> int:
        """Publish the next version from the trainer's exported ``buckets``; its number."""
        self.version += 1
        folder = version_dir(self.source_dir, self.version)
        shutil.rmtree(folder, ignore_errors=True)  # a previous run's version of that number
        if self.snapshot and self.confirmed == self.version - 1:
            self._publish_delta(folder, buckets)
        else:
            self._publish_full(folder, buckets)
        return self.version

    def written_bytes(self, version: int) -> int:
        """Bytes of published ``version``: what every engine host reads."""
        return sum(f.stat().st_size for f in version_dir(self.source_dir, version).iterdir())

    def confirm(self, pulled: int) -> None:
        """Every engine holds version ``pulled`` (the last published), so the next version may
        be a delta against it (the snapshot); the versions before it are deleted."""
        self.confirmed = pulled
        for older in self.source_dir.glob("weight_v*"):
            if older.name < version_dir(self.source_dir, pulled).name:
                shutil.rmtree(older, ignore_errors=True)

    def _publish_full(self, folder: Path, buckets: Iterable[WeightBucket]) -> None:
        folder.mkdir(parents=True)
        self.full_bytes, self.origin, weight_map = 0, uuid.uuid4().hex, {}
        for i, bucket in enumerate(buckets):
            file = f"model-{i:05d}.safetensors"
            (folder / file).write_bytes(bucket.data)
            for name, tensor in bucket:
                self.snapshot[name] = _bytes_of(tensor)
                weight_map[name] = file
            self.full_bytes += bucket.nbytes
        write_index(folder, {"version": f"{self.version:06d}", "origin": self.origin}, weight_map)

    def _publish_delta(self, folder: Path, buckets: Iterable[WeightBucket]) -> None:
        files, self.full_bytes = [], 0
        for bucket in buckets:
            entries = {}
            for name, tensor in bucket:
                new = _bytes_of(tensor)
                diff = encode(self.encoding, self._base(name, new), new)
                if diff is not None:
                    entries[name] = (diff, checksum(self.algorithm, new))
                self.snapshot[name] = new
            files += [entries] if entries else []
            self.full_bytes += bucket.nbytes
        write_delta(folder, self.version, self.encoding, self.algorithm, files, self.origin)

    def _base(self, name: str, new: np.ndarray) -> np.ndarray:
        base = self.snapshot.get(name)
        if base is None or base.size != new.size:
            raise RuntimeError(
                f"delta weight sync: {name} ({new.size} bytes) is not in the last sync's snapshot in that size; "
                "the trainer's export changed its names or dtypes between syncs"
            )
        return base


def _bytes_of(tensor) -> np.ndarray:
    """A CPU tensor's bytes as a flat ``uint8`` array (sharing its memory)."""
    import torch

    return tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
