"""slime's own data-source classes (``slime.rollout.data_source``) on our `PromptDataSource`.

User code subclasses them (``class MySource(RolloutDataSourceWithBuffer)``) and names the
subclass with ``--data-source-path``; naming ``RolloutDataSourceWithBuffer`` itself selects
our ``prompt`` source directly. The prompt order (shuffled per epoch with
``--rollout-shuffle`` / ``--rollout-seed``), ``group_index`` per prompt, ``index`` unique
per sample and the buffer of returned groups are `slime_core.data.source.PromptDataSource`'s.
``save(rollout_id)`` / ``load(rollout_id)`` keep its state in
``{args.save or args.load}/rollout/global_dataset_state_dict_{rollout_id}.json``, as slime
keeps its ``.pt``.
"""

from __future__ import annotations

import abc
import logging
from pathlib import Path

from slime_compat.args import config_of
from slime_compat.functions import load_function
from slime_compat.sample import Sample, promote_all
from slime_core.data.source import PromptDataSource

log = logging.getLogger(__name__)


class DataSource(abc.ABC):
    """slime's data-source interface: prompt groups out, groups back in, state by rollout id."""

    @abc.abstractmethod
    def get_samples(self, num_samples: int) -> list[list[Sample]]:
        """``num_samples`` prompt groups."""

    @abc.abstractmethod
    def add_samples(self, samples: list[list[Sample]]) -> None:
        """Take groups back (partial rollout)."""

    @abc.abstractmethod
    def save(self, rollout_id) -> None:
        """Save the state reached after rollout ``rollout_id``."""

    @abc.abstractmethod
    def load(self, rollout_id=None) -> None:
        """Restore what `save` wrote for ``rollout_id``."""

    @abc.abstractmethod
    def __len__(self) -> int:
        """The number of prompts."""


class RolloutDataSource(DataSource):
    """The ``--prompt-data`` prompts in groups of ``--n-samples-per-prompt``; read-only, as in slime."""

    def __init__(self, args):
        self.args = args
        self.prompts = _prompt_source(args)

    def get_samples(self, num_samples: int) -> list[list[Sample]]:
        return promote_all(self.prompts.get_samples(num_samples))

    def add_samples(self, samples) -> None:
        raise RuntimeError(
            f"{type(self).__name__} is read-only and takes no samples back; use "
            "RolloutDataSourceWithBuffer for partial rollout"
        )

    def save(self, rollout_id) -> None:
        path = _state_file(self.args.save, rollout_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.prompts.save(path)

    def load(self, rollout_id=None) -> None:
        if self.args.load is None:
            return
        path = _state_file(self.args.load, rollout_id)
        if not path.is_file():
            log.info("%s does not exist: the data source starts from the beginning", path)
            return
        self.prompts.load(path)

    def __len__(self) -> int:
        return len(self.prompts.dataset)


class RolloutDataSourceWithBuffer(RolloutDataSource):
    """`RolloutDataSource` that takes groups back and hands them out first, chosen by
    ``--buffer-filter-path`` (default `pop_first`)."""

    def __init__(self, args):
        super().__init__(args)
        path = getattr(args, "buffer_filter_path", None)
        self.buffer_filter = load_function(path) if path else pop_first
        self.prompts.buffer.buffer_filter = lambda groups, num: self.buffer_filter(self.args, None, groups, num)

    @property
    def buffer(self) -> list[list[Sample]]:
        """The groups waiting to be handed out again, oldest first."""
        return self.prompts.buffer.groups

    def add_samples(self, samples) -> None:
        self.prompts.add_samples(samples)

    def get_buffer_length(self) -> int:
        return len(self.buffer)


def pop_first(args, rollout_id, buffer: list[list[Sample]], num_samples: int) -> list[list[Sample]]:
    """slime's default buffer filter: remove and return the oldest ``num_samples`` groups."""
    chosen = buffer[:num_samples]
    del buffer[:num_samples]
    return chosen


def _prompt_source(args) -> PromptDataSource:
    from slime.rollout.sglang_rollout import GenerateState

    if not getattr(args, "prompt_data", None):
        raise ValueError(
            "slime's RolloutDataSource serves the prompts of --prompt-data, and this run has none; "
            "give --prompt-data FILE"
        )
    return PromptDataSource.from_config(config_of(args), GenerateState(args).tokenizer)


def _state_file(directory: str, rollout_id) -> Path:
    return Path(directory) / "rollout" / f"global_dataset_state_dict_{rollout_id}.json"
