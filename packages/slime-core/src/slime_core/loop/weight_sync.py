"""Pushing the trainer's weights to the rollout engines after a training step.

The train backend exports its weights in Hugging Face names and shapes, a bucket of
``--update-weight-buffer-size`` bytes at a time; each bucket goes to every engine by one of
three transports (``--update-weight-transport``):

- ``tensor``: in memory, over the engines' ``/update_weights_from_tensor`` (colocated runs
  and CPU runs);
- ``broadcast``: a collective from the driver (rank 0) to every engine, nccl on GPUs and
  gloo on CPU, announced over ``/update_weights_from_distributed`` (disaggregated GPUs);
- ``disk``: the trainer writes a Hugging Face directory into the run directory and every
  engine loads it (``/update_weights_from_disk``); works wherever both sides see the folder.

Engines are paused and their caches flushed around an update, so no request mixes two
versions inside one forward pass; generation resumes where it stopped. ``lock`` is held
while the trainer's weights are read for an update (and, by the loop, while they change in a
training step), so an engine replaced by the fault-tolerance monitor gets one consistent
version (`push_to_engine`).
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path


def default_transport(config) -> str:
    """``tensor`` when colocated or without CUDA, else ``broadcast``."""
    if config.update_weight_transport:
        return config.update_weight_transport
    import torch

    return "tensor" if config.colocate or not torch.cuda.is_available() else "broadcast"


class WeightSync:
    """Sends the trainer's current weights to the engines, and reports time and bytes."""

    def __init__(self, config, trainer, engines, run, run_dir):
        self.config, self.trainer, self.engines, self.run = config, trainer, engines, run
        self.transport = default_transport(config)
        self.weights_dir = Path(run_dir.path) / "weights"
        self.lock = threading.RLock()
        self._broadcaster = None

    def push(self, version: int) -> dict[str, float]:
        """Pause, update every engine to ``version``, flush, resume; the update's metrics."""
        with self.lock:
            return self._push(self.engines, version)

    def push_to_engine(self, url: str, version: int) -> dict[str, float]:
        """Bring one (new) engine to ``version`` by the run's transport. The next `push` forms
        a new broadcast group, since the old one has a member that is gone."""
        from slime_sglang.engine_group import EngineGroup

        with self.lock:
            self._drop_broadcaster()
            return self._push(EngineGroup([url]), version)

    def _push(self, engines, version: int) -> dict[str, float]:
        start = time.perf_counter()
        self.run(engines.pause())
        try:
            sent = getattr(self, f"_by_{self.transport}")(engines, str(version))
            self.run(engines.flush_cache())
        finally:
            self.run(engines.resume_generation())
        seconds = time.perf_counter() - start
        return {"weight_update/seconds": seconds, "weight_update/bytes": float(sent),
                "weight_update/gbps": sent / max(seconds, 1e-9) / 1e9}

    def _by_tensor(self, engines, version: str) -> int:
        return self._each_bucket(lambda bucket: self.run(engines.update_weights_from_tensor(bucket, version)))

    def _by_broadcast(self, engines, version: str) -> int:
        from slime_sglang.weight_broadcast import WeightBroadcaster

        connect = lambda: self.run(WeightBroadcaster.connect(  # noqa: E731
            engines.urls, backend=_collective_backend(), ranks_per_engine=self.config.rollout_num_gpus_per_engine))
        if engines is not self.engines:  # one engine, once: a group of its own
            broadcaster = connect()
            try:
                return self._each_bucket(lambda bucket: self.run(broadcaster.broadcast(bucket, version)))
            finally:
                self.run(broadcaster.close())
        if self._broadcaster is None:
            self._broadcaster = connect()
        return self._each_bucket(lambda bucket: self.run(self._broadcaster.broadcast(bucket, version)))

    def _each_bucket(self, send) -> int:
        """``send`` every bucket of the trainer's export; the bytes sent."""
        sent = 0
        for bucket in self.trainer.export_weights(self.config.update_weight_buffer_size):
            send(bucket)
            sent += bucket.nbytes
        return sent

    def _by_disk(self, engines, version: str) -> int:
        path = self.weights_dir / f"v{int(version):07d}"
        if not path.is_dir():  # a replaced engine gets the directory its peers loaded
            self.trainer.call("save_hf", str(path))
        self.run(engines.update_weights_from_disk(str(path), version))
        sent = sum(f.stat().st_size for f in path.glob("*.safetensors"))
        for older in self.weights_dir.glob("v*"):
            if older != path:
                shutil.rmtree(older, ignore_errors=True)
        return sent

    def close(self) -> None:
        if self._broadcaster is not None:
            self.run(self._broadcaster.close())
            self._broadcaster = None

    def _drop_broadcaster(self) -> None:
        """Forget the broadcast group (an engine of it was replaced); live engines leave it."""
        broadcaster, self._broadcaster = self._broadcaster, None
        if broadcaster is not None:
            try:
                self.run(broadcaster.close())
            except Exception:  # noqa: BLE001 - the replaced engine cannot answer; the rest have left
                pass


def _collective_backend() -> str:
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"
