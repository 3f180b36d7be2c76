"""`EngineControl`: the engines' control calls as plain blocking calls, for the driver.

The rollout backend's `slime_core.rollout_backend.Engines` are coroutines that must run on the
rollout's event loop (`slime_core.rollout.event_loop.EventLoopThread`), the one the rollout
generates on. The driver's parts that pause, update, release and replace engines
(``slime_core.loop``: colocation, weight sync, fault tolerance) are synchronous code in other
threads; they call this facade, which runs each call on that loop and returns once every
engine answered (raising the first engine's error, as `Engines` does).
"""

from __future__ import annotations

from slime_core.rank.weight_bucket import WeightBucket
from slime_core.rollout.event_loop import EventLoopThread
from slime_core.rollout_backend import Engines


class EngineControl:
    """``engines``' control calls, each run on ``loop`` and waited for."""

    def __init__(self, engines: Engines, loop: EventLoopThread):
        self.engines, self._loop = engines, loop

    @property
    def urls(self) -> list[str]:
        return self.engines.urls

    @property
    def transports(self) -> tuple[str, ...]:
        return tuple(self.engines.transports)

    @property
    def preferred_transport(self) -> str | None:
        """The transport the engines default to when not colocated (``Engines``, optional)."""
        return getattr(self.engines, "preferred_transport", None)

    @property
    def loads_lora_adapters(self) -> bool:
        """Whether the engines merge pushed LoRA adapters themselves (``Engines``, optional)."""
        return getattr(self.engines, "loads_lora_adapters", False)

    @property
    def restartable(self) -> bool:
        return self.engines.restartable

    def only(self, index: int) -> EngineControl:
        """Engine ``index`` alone (`Engines.only`), on the same loop."""
        return EngineControl(self.engines.only(index), self._loop)

    # -- generation around a weight update ---------------------------------------------------
    def pause(self) -> None:
        self._loop.run(self.engines.pause())

    def resume_generation(self) -> None:
        self._loop.run(self.engines.resume_generation())

    def flush_cache(self) -> None:
        self._loop.run(self.engines.flush_cache())

    # -- memory, for colocated runs ----------------------------------------------------------
    def release_memory(self) -> None:
        self._loop.run(self.engines.release_memory())

    def resume_memory(self) -> None:
        self._loop.run(self.engines.resume_memory())

    # -- the weight transports ---------------------------------------------------------------
    def update_weights_from_tensor(self, bucket: WeightBucket, version: str) -> None:
        self._loop.run(self.engines.update_weights_from_tensor(bucket, version))

    def update_weights_by_broadcast(self, bucket: WeightBucket, version: str) -> None:
        self._loop.run(self.engines.update_weights_by_broadcast(bucket, version))

    def update_weights_from_disk(self, path: str, version: str) -> None:
        self._loop.run(self.engines.update_weights_from_disk(path, version))

    def pull_weights(self, source_dir: str, local_dir: str, version: int) -> None:
        self._loop.run(self.engines.pull_weights(source_dir, local_dir, version))

    def close_weight_updates(self) -> None:
        self._loop.run(self.engines.close_weight_updates())

    # -- fault tolerance (blocking already: the monitor's thread calls them) -----------------
    def health_problem(self, index: int, timeout: float) -> str | None:
        return self.engines.health_problem(index, timeout)

    def restart(self, index: int) -> str:
        return self.engines.restart(index)
