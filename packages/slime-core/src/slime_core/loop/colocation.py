"""Colocated mode (``--colocate``): training and engines take turns on the same devices.

Before generating, the train ranks move their weights and optimizer state to CPU memory and
the engines take their memory back; before training, the engines release theirs and the
ranks move back. `Colocation` remembers who holds the devices, so each switch happens once
however often a phase asks for it. Without ``--colocate`` (or without engines, or without training) it does nothing.
"""

from __future__ import annotations

from slime_core.rollout.engine_control import EngineControl


class Colocation:
    def __init__(self, enabled: bool, trainer, engines: EngineControl | None):
        self.enabled = enabled and engines is not None and trainer is not None
        self.trainer, self.engines = trainer, engines
        self.trainer_resident = self.engines_resident = True  # both start loaded

    def for_training(self) -> None:
        if not self.enabled:
            return
        if self.engines_resident:
            self.engines.release_memory()
            self.engines_resident = False
        if not self.trainer_resident:
            self.trainer.onload()
            self.trainer_resident = True

    def for_rollout(self) -> None:
        if not self.enabled:
            return
        if self.trainer_resident:
            self.trainer.offload()
            self.trainer_resident = False
        if not self.engines_resident:
            self.engines.resume_memory()
            self.engines_resident = True
