"""Pushing the trainer's weights to the rollout engines after a training step.

The train backend exports its weights in Hugging Face names and shapes, a bucket of
``--update-weight-buffer-size`` bytes at a time; each bucket goes to every engine by one of
three transports (``--update-weight-transport``), each a method of the rollout backend's
`slime_core.rollout_backend.Engines`, which says which of them its engines take and may name
the one it prefers (`default_transport`):

- ``tensor``: in memory, bucket by bucket (by default colocated runs and CPU runs);
- ``broadcast``: a collective from the driver (rank 0) to every engine, nccl on GPUs and
  gloo on CPU (by default disaggregated GPUs, and vLLM on CPU); the engines keep the group
  until the run ends;
- ``disk``: the trainer writes a Hugging Face directory into the run directory and every
  engine loads it; works wherever both sides see the folder. With ``--update-weight-mode
  delta`` it writes only what changed since the last sync (`slime_core.loop.delta_sync`); each
  engine pulls that into its host's local checkpoint (``--update-weight-local-checkpoint-dir``),
  verified per tensor, and loads the checkpoint.

With LoRA (``--lora-rank``) and engines that merge adapters themselves (``loads_lora_adapters``:
the CPU engine), every transport moves the adapter alone (`lora_export`); other engines get the
merged weights, said once in the run's log.

Engines are paused and their caches flushed around an update, so no request mixes two
versions inside one forward pass; generation resumes where it stopped. ``lock`` is held
while the trainer's weights are read for an update (and, by the loop, while they change in a
training step), so an engine replaced by the fault-tolerance monitor gets one consistent
version (`push_to_engine`). Weights that are not finite are never sent: the push raises
``slime_core.faults.nonfinite.NonFiniteError`` before the engines are paused.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from slime_core.rollout.engine_control import EngineControl

if TYPE_CHECKING:
    from slime_core.config import Config


def default_transport(config: Config, supported: tuple[str, ...], gpu: bool, preferred: str | None = None) -> str:
    """``--update-weight-transport`` if given; else, when not colocated, the engines' ``preferred``
    one (``Engines.preferred_transport``) if they take it; else ``tensor`` when colocated or without
    GPUs (``gpu``: the placement's) and ``broadcast`` otherwise, or ``disk`` (then the first) when
    the engines do not take that one."""
    if config.update_weight_transport:
        return config.update_weight_transport
    if config.update_weight_mode == "delta":  # publishes files
        return "disk"
    if not config.colocate and preferred in supported:
        return preferred
    rule = "tensor" if config.colocate or not gpu else "broadcast"
    if rule in supported:
        return rule
    return "disk" if "disk" in supported else supported[0]


def lora_export(config: Config, engines: EngineControl, transport: str, log: Callable) -> bool:
    """Whether a LoRA run's syncs send the adapter alone: yes when the engines merge adapters
    themselves; otherwise the merged weights, with a warning in ``log``. ``disk`` without delta
    loads what ``--save-hf`` writes, a peft adapter directory, so it needs such engines."""
    if not config.get("lora_rank"):
        return False
    if engines.loads_lora_adapters:
        how = f"{transport}, delta" if config.update_weight_mode == "delta" else transport
        log(f"slime run: LoRA: weight syncs ({how}) send the adapter alone; the engines merge it into their base")
        return True
    if transport == "disk" and config.update_weight_mode != "delta":
        raise ValueError(
            "--lora-rank with --update-weight-transport disk: the trainer writes a peft adapter directory, and "
            "these engines load only full Hugging Face directories; use --update-weight-transport tensor or "
            "broadcast, --update-weight-mode delta (merged weights), or the CPU engine (it loads adapters)"
        )
    log(
        "slime run: warning: LoRA: these engines do not load LoRA adapters (only the CPU engine started by the run "
        "does), so every weight sync sends the full merged weights, not the adapter"
    )
    return False


class WeightSync:
    """Sends the trainer's current weights to the engines (their control calls, on the rollout
    loop: `slime_core.rollout.engine_control.EngineControl`) and reports time and bytes."""

    def __init__(
        self, config: Config, trainer, engines: EngineControl, weights_dir: Path, gpu: bool, log: Callable = print
    ):
        self.transport = default_transport(config, tuple(engines.transports), gpu, engines.preferred_transport)
        if not config.update_weight_transport:
            log(
                f"slime run: weight updates by {self.transport} (the default here; --update-weight-transport picks one)"
            )
        if self.transport not in engines.transports:
            raise ValueError(
                f"--update-weight-transport {self.transport}: these engines take "
                f"{', '.join(engines.transports)}; pick one of those"
            )
        self.adapter_only = lora_export(config, engines, self.transport, log)
        self.trainer, self.engines = trainer, engines
        self.bucket_bytes = config.update_weight_buffer_size
        self.weights_dir = weights_dir
        self.lock = threading.RLock()
        self.delta = None
        if config.update_weight_mode == "delta":
            from slime_core.loop.delta_sync import DeltaPublisher

            encoding, algorithm = config.update_weight_delta_encoding, config.update_weight_delta_checksum
            self.delta = DeltaPublisher(weights_dir, encoding, algorithm)
            self.local_dir = config.update_weight_local_checkpoint_dir

    def push(self, version: int) -> dict[str, float]:
        """Pause, update every engine to ``version``, flush, resume; the update's metrics."""
        with self.lock:
            return self._push(self.engines, version)

    def push_to_engine(self, index: int, version: int) -> dict[str, float]:
        """Bring engine ``index`` (just replaced) to ``version`` by the run's transport, alone
        (a broadcast group of its own, closed after). The run's broadcast group is closed
        first: it has a member that is gone, and the next `push` forms a new one."""
        with self.lock:
            self._leave_weight_group()
            if self.delta is not None:
                self.delta.reset()  # the new engine's host may hold no local copy: publish a full version
            one = self.engines.only(index)
            try:
                return self._push(one, version)
            finally:
                one.close_weight_updates()

    def _push(self, engines: EngineControl, version: int) -> dict[str, float]:
        self.trainer.check_finite_weights(f"push weight version {version} to the engines")
        start = time.perf_counter()
        engines.pause()
        try:
            sent = getattr(self, f"_by_{self.transport}")(engines, str(version))
            engines.flush_cache()
        finally:
            engines.resume_generation()
        seconds = time.perf_counter() - start
        metrics = {
            "weight_update/seconds": seconds,
            "weight_update/bytes": float(sent),
            "weight_update/gbps": sent / max(seconds, 1e-9) / 1e9,
        }
        if self.delta is not None:  # what a full sync would have moved
            metrics["weight_update/full_bytes"] = float(self.delta.full_bytes)
        return metrics

    def _by_tensor(self, engines: EngineControl, version: str) -> int:
        return self._each_bucket(lambda bucket: engines.update_weights_from_tensor(bucket, version))

    def _by_broadcast(self, engines: EngineControl, version: str) -> int:
        return self._each_bucket(lambda bucket: engines.update_weights_by_broadcast(bucket, version))

    def _each_bucket(self, send) -> int:
        """``send`` every bucket of the trainer's export; the bytes sent."""
        sent = 0
        for bucket in self.trainer.export_weights(self.bucket_bytes, self.adapter_only):
            send(bucket)
            sent += bucket.nbytes
        return sent

    def _by_disk(self, engines: EngineControl, version: str) -> int:
        if self.delta is not None:
            return self._by_delta(engines, version)
        path = self.weights_dir / f"v{int(version):07d}"
        if not path.is_dir():  # a replaced engine gets the directory its peers loaded
            self.trainer.save_hf(str(path))  # with LoRA a peft adapter directory (`lora_export`)
        engines.update_weights_from_disk(str(path), version)
        sent = sum(f.stat().st_size for f in path.glob("*.safetensors"))
        for older in self.weights_dir.glob("v*"):
            if older != path:
                shutil.rmtree(older, ignore_errors=True)
        return sent

    def _by_delta(self, engines: EngineControl, version: str) -> int:
        """Publish the next version (full, then deltas), have every engine pull it into its
        host's local checkpoint and load that; the bytes published."""
        assert self.delta is not None
        published = self.delta.publish(self.trainer.export_weights(self.bucket_bytes, self.adapter_only))
        engines.pull_weights(str(self.weights_dir), self.local_dir, published)
        engines.update_weights_from_disk(self.local_dir, version)
        sent = self.delta.written_bytes(published)
        self.delta.confirm(published)  # a failure above leaves it unconfirmed: the next version is full
        return sent

    def close(self) -> None:
        self.engines.close_weight_updates()

    def _leave_weight_group(self) -> None:
        """Close the engines' weight updates; the replaced engine cannot answer, the rest leave."""
        try:
            self.engines.close_weight_updates()
        except Exception:  # noqa: BLE001 - the engine that is gone fails its part; the others have left
            pass
