"""The buffer of partial groups a rollout hands back, served before fresh prompts.

With partial rollout, groups whose generation was interrupted return to the data source;
the next rollout continues them first. Which buffered groups go out first is decided by a
buffer filter: ``buffer_filter(groups, num_groups) -> chosen groups`` (registered with
``slime_register_buffer_filters``; the default, ``fifo``, takes the oldest).
"""

from __future__ import annotations

from collections.abc import Callable

from slime_core.sample import Sample

BufferFilter = Callable[[list[list[Sample]], int], list[list[Sample]]]


def take_oldest(groups: list[list[Sample]], num_groups: int) -> list[list[Sample]]:
    """The ``fifo`` buffer filter: the groups that were handed back first."""
    return groups[:num_groups]


class GroupBuffer:
    """Partial groups waiting to be continued, in the order they came back."""

    def __init__(self, buffer_filter: BufferFilter = take_oldest):
        self.groups: list[list[Sample]] = []
        self.buffer_filter = buffer_filter

    def __len__(self) -> int:
        return len(self.groups)

    def add(self, groups: list[list[Sample]]) -> None:
        self.groups.extend(group for group in groups if group)

    def take(self, num_groups: int) -> list[list[Sample]]:
        """Remove and return up to ``num_groups`` groups chosen by the buffer filter."""
        chosen = self.buffer_filter(list(self.groups), min(num_groups, len(self.groups)))
        remaining = list(self.groups)
        for group in chosen:
            position = next((i for i, kept in enumerate(remaining) if kept is group), None)
            if position is None:
                raise ValueError("a buffer filter must return distinct groups taken from the buffer it was given")
            remaining.pop(position)
        self.groups = remaining
        return chosen

    def state(self) -> list[list[dict]]:
        return [[sample.to_dict() for sample in group] for group in self.groups]

    def load_state(self, state: list[list[dict]]) -> None:
        self.groups = [[Sample.from_dict(data) for data in group] for group in state]
