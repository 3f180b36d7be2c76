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
versions inside one forward pass; generation resumes where it stopped.
"""

from __future__ import annotations

import shutil
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
        self._broadcaster = None

    def push(self, version: int) -> dict[str, float]:
        """Pause, update every engine to ``version``, flush, resume; the update's metrics."""
        start = time.perf_counter()
        self.run(self.engines.pause())
        try:
            sent = getattr(self, f"_by_{self.transport}")(str(version))
            self.run(self.engines.flush_cache())
        finally:
            self.run(self.engines.resume_generation())
        seconds = time.perf_counter() - start
        return {"weight_update/seconds": seconds, "weight_update/bytes": float(sent),
                "weight_update/gbps": sent / max(seconds, 1e-9) / 1e9}

    def _by_tensor(self, version: str) -> int:
        return self._each_bucket(lambda bucket: self.run(self.engines.update_weights_from_tensor(bucket, version)))

    def _by_broadcast(self, version: str) -> int:
        if self._broadcaster is None:
            from slime_sglang.weight_broadcast import WeightBroadcaster

            self._broadcaster = self.run(WeightBroadcaster.connect(
                self.engines.urls, backend=_collective_backend(), ranks_per_engine=self.config.rollout_num_gpus_per_engine))
        return self._each_bucket(lambda bucket: self.run(self._broadcaster.broadcast(bucket, version)))

    def _each_bucket(self, send) -> int:
        """``send`` every bucket of the trainer's export; the bytes sent."""
        sent = 0
        for bucket in self.trainer.export_weights(self.config.update_weight_buffer_size):
            send(bucket)
            sent += _bytes(bucket)
        return sent

    def _by_disk(self, version: str) -> int:
        path = self.weights_dir / f"v{int(version):07d}"
        self.trainer.call("save_hf", str(path))
        self.run(self.engines.update_weights_from_disk(str(path), version))
        sent = sum(f.stat().st_size for f in path.glob("*.safetensors"))
        for older in self.weights_dir.glob("v*"):
            if older != path:
                shutil.rmtree(older, ignore_errors=True)
        return sent

    def close(self) -> None:
        if self._broadcaster is not None:
            self.run(self._broadcaster.close())
            self._broadcaster = None


def _bytes(bucket) -> int:
    return sum(tensor.numel() * tensor.element_size() for _, tensor in bucket)


def _collective_backend() -> str:
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"
