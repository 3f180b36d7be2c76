"""``--data-source-path``: slime's data-source class behind our data-source contract.

slime builds ``cls(args)`` and calls ``get_samples(n)`` (n prompt groups) and
``add_samples(groups)``; when it checkpoints rollout r it calls ``save(r)``, and when it
resumes from that checkpoint ``load(r)``: the class keeps its own state (usually a file
under ``args.save``). Our checkpoints save a data source's ``state_dict()`` instead, so
`SlimeDataSource` calls ``save`` from the ``slime_before_save`` hook and puts the rollout id
its state belongs to in its ``state_dict()``; resuming hands that id to ``load``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from slime_compat.args import config_of, run_args, slime_args
from slime_compat.functions import load_function
from slime_compat.sample import fill_loss_mask, promote_all

if TYPE_CHECKING:
    from slime_core.config.config import Config

log = logging.getLogger(__name__)
_BY_CONFIG: dict[int, SlimeDataSource] = {}  # the run's source, for the lifecycle hooks


class SlimeDataSource:
    """Our data source (``from_config``, ``get_samples``, ``add_samples``, state) around slime's."""

    def __init__(self, source):
        self.source = source
        self.rollout_id: int | None = None  # the latest rollout that started (slime_before_rollout)

    @classmethod
    def from_config(cls, config: Config, tokenizer=None, buffer_filter=None) -> SlimeDataSource:
        _BY_CONFIG[id(config)] = source = cls(load_function(config.data_source_path)(slime_args(config)))
        return source

    def get_samples(self, num_groups: int):
        return fill_loss_mask(promote_all(self.source.get_samples(num_groups)))

    def add_samples(self, groups) -> None:
        self.source.add_samples(groups)

    def state_dict(self) -> dict:
        """The rollout id slime's ``save`` / ``load`` name the source's state by: the latest
        rollout that started taking prompts (the loop snapshots its source before each rollout
        starts, so a checkpoint of rollout r holds r)."""
        return {"rollout_id": self.rollout_id}

    def load_state_dict(self, state: dict) -> None:
        """Resuming: slime's ``load(rollout_id)`` of the checkpoint's rollout."""
        self.rollout_id = state.get("rollout_id")  # {}: a checkpoint from before save/load were called
        if self.rollout_id is not None and _has(self.source, "load"):
            self.source.load(self.rollout_id)

    def save(self, rollout_id: int) -> None:
        """slime's ``save(rollout_id)``, when the checkpoint of ``rollout_id`` is written."""
        if _has(self.source, "save"):
            self.source.save(rollout_id)


def _has(source, method: str) -> bool:
    """Whether ``source`` has slime's ``method``; a warning when not (its state is not kept)."""
    if callable(getattr(source, method, None)):
        return True
    log.warning(
        "--data-source-path %s has no %s(rollout_id): a resumed run starts it from its beginning; give the "
        "class save/load methods (slime.rollout.data_source.DataSource) to continue where it was",
        type(source).__qualname__,
        method,
    )
    return False


def before_rollout(rollout_id: int, config: Config) -> None:
    """``slime_before_rollout``: remember the rollout whose prompts the source hands out now."""
    if config.get("data_source") == "slime.data_source" and id(config) in _BY_CONFIG:
        _BY_CONFIG[id(config)].rollout_id = rollout_id


def before_save(rollout_id: int) -> None:
    """``slime_before_save``: slime's ``save(rollout_id)`` on the run's source."""
    config = config_of(run_args())
    if config.get("data_source") == "slime.data_source" and id(config) in _BY_CONFIG:
        _BY_CONFIG[id(config)].save(rollout_id)
