"""``--data-source-path``: slime's data-source class behind our data-source contract.

slime builds ``cls(args)`` and calls ``get_samples(n)`` (n prompt groups) and
``add_samples(groups)``.
"""

from __future__ import annotations

from slime_compat.args import slime_args
from slime_compat.functions import load_function
from slime_compat.sample import promote_all


class SlimeDataSource:
    """Our data source (``from_config``, ``get_samples``, ``add_samples``, state) around slime's."""

    def __init__(self, source):
        self.source = source

    @classmethod
    def from_config(cls, config, tokenizer=None, buffer_filter=None) -> SlimeDataSource:
        return cls(load_function(config.data_source_path)(slime_args(config)))

    def get_samples(self, num_groups: int):
        return promote_all(self.source.get_samples(num_groups))

    def add_samples(self, groups) -> None:
        self.source.add_samples(groups)

    def state_dict(self) -> dict:
        """Nothing: slime's source saves itself with ``save(rollout_id)``, which our checkpoints
        (they pass no rollout id) do not call yet, so a resumed run restarts it from the start."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Nothing to restore (see `state_dict`)."""
