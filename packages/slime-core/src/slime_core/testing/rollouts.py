"""What a run's rollouts produced, kept for a test's assertions."""

from __future__ import annotations

from slime_core import hookimpl
from slime_core.sample import Sample


class RolloutSamples:
    """A plugin that keeps the samples of every rollout of a run, in the driver, as the trainer
    gets them (the ``slime_after_rollout`` hook): register an instance for the run (``hooks=[kept]``
    of the ``slime_run`` / ``fake_run`` fixtures, or ``Plugins().register_object``), then assert
    on ``kept.samples``."""

    def __init__(self) -> None:
        self.samples: list[Sample] = []  # every rollout's samples, group after group

    @hookimpl
    def slime_after_rollout(self, rollout_id, groups, metrics):
        self.samples += [sample for group in groups for sample in group]
