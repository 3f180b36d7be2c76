"""`DataSource`: where the rollout gets its prompt groups, and the default one.

A data source hands out groups of ``n_samples_per_prompt`` copies of a prompt, takes
partial groups back (partial rollout), and saves/loads its position so that a resumed
run sees the same prompts in the same order.
"""

from __future__ import annotations

import copy
import json
import os
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from slime_core.data.buffer import BufferFilter, GroupBuffer, take_oldest
from slime_core.data.prompt_dataset import PromptDataset, PromptFormat
from slime_core.sample import Sample

if TYPE_CHECKING:
    from slime_core.config import Config


@runtime_checkable
class DataSource(Protocol):
    """What the rollout needs from a source of prompts."""

    def get_samples(self, num_groups: int) -> list[list[Sample]]:
        """``num_groups`` groups, partial groups from the buffer first."""

    def add_samples(self, groups: list[list[Sample]]) -> None:
        """Take back partial groups, to be handed out again first."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue in the same order."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict`."""


class PromptDataSource:
    """The default data source: a `PromptDataset` served in per-epoch shuffled order."""

    def __init__(
        self,
        dataset: PromptDataset,
        n_samples_per_prompt: int,
        shuffle: bool = True,
        seed: int = 42,
        buffer_filter: BufferFilter = take_oldest,
    ):
        self.dataset = dataset
        self.n_samples_per_prompt = n_samples_per_prompt
        self.shuffle = shuffle
        self.seed = seed
        self.buffer = GroupBuffer(buffer_filter)
        self.epoch = 0
        self.offset = 0  # position in the current epoch's order
        self.next_group_index = 0
        self.next_global_index = 0  # Sample.global_index of the next new sample
        self._order = self._epoch_order(0)

    @classmethod
    def from_config(cls, config: Config, tokenizer=None, buffer_filter: BufferFilter = take_oldest) -> PromptDataSource:
        """Build from slime's options (``--prompt-data``, ``--input-key``, ...)."""
        fmt = PromptFormat.from_config(config)
        dataset = PromptDataset.load(config.prompt_data, fmt, tokenizer)
        return cls(dataset, config.n_samples_per_prompt, config.rollout_shuffle, config.rollout_seed, buffer_filter)

    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(order)
        return order

    def get_samples(self, num_groups: int) -> list[list[Sample]]:
        groups = self.buffer.take(num_groups)
        while len(groups) < num_groups:
            if self.offset == len(self._order):
                self.epoch += 1
                self.offset = 0
                self._order = self._epoch_order(self.epoch)
            groups.append(self._new_group(self.dataset.samples[self._order[self.offset]]))
            self.offset += 1
        return groups

    def _new_group(self, template: Sample) -> list[Sample]:
        group_index = self.next_group_index
        self.next_group_index += 1
        group = []
        for index in range(self.n_samples_per_prompt):
            sample = copy.deepcopy(template)
            sample.group_index, sample.index, sample.global_index = group_index, index, self.next_global_index
            self.next_global_index += 1
            group.append(sample)
        return group

    def add_samples(self, groups: list[list[Sample]]) -> None:
        self.buffer.add(groups)

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "offset": self.offset,
            "next_group_index": self.next_group_index,
            "next_global_index": self.next_global_index,
            "dataset_size": len(self.dataset),
            "seed": self.seed,
            "buffer": self.buffer.state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["dataset_size"] != len(self.dataset) or state["seed"] != self.seed:
            raise ValueError(
                f"cannot resume the data order: the checkpoint was made with {state['dataset_size']} prompts and seed "
                f"{state['seed']}, this run has {len(self.dataset)} prompts and seed {self.seed}; use the same "
                "--prompt-data and --rollout-seed as the run being resumed"
            )
        self.epoch, self.offset = state["epoch"], state["offset"]
        self.next_group_index = state["next_group_index"]
        # a checkpoint written before the counter existed: every group had n_samples_per_prompt samples
        self.next_global_index = state.get("next_global_index", self.next_group_index * self.n_samples_per_prompt)
        self._order = self._epoch_order(self.epoch)
        self.buffer.load_state(state["buffer"])

    def save(self, path: str | Path) -> None:
        """Write the state as JSON atomically (a crash never leaves half a file)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.state_dict()))
        os.replace(tmp, path)

    def load(self, path: str | Path) -> None:
        self.load_state_dict(json.loads(Path(path).read_text()))
