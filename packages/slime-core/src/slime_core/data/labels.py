"""Each record's label, checked against what its reward function grades before a run starts.

A reward function may declare, when it is registered, which labels it grades
(``register(name, fn, label=check)``, `slime_core.plugins.registry.Entry.label`): a label of
another kind (a dict where ``math`` wants an answer, ``null`` for ``exact_match``) would
otherwise score 0 on every sample without a word. The reward is the record's
``metadata["rm_type"]``, else ``--rm-type``; functions that declare nothing (most third-party
ones, ``--custom-rm-path``) are not checked, and a run that scores nothing (SFT, replayed
rollouts) checks nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from slime_core.components import run_generates
from slime_core.data.prompt_dataset import PromptFormat
from slime_core.data.records import DataError

if TYPE_CHECKING:
    from slime_core.config import Config

#: ``check(where, record)``: raises `DataError` naming ``where`` for a label of the wrong kind
LabelCheck = Callable[[str, dict[str, Any]], None]


def label_checker(config: Config, plugins, fmt: PromptFormat | None = None, rm_type: str | None = None) -> LabelCheck:
    """The check of one record's label against its reward function's declaration; ``fmt``: the
    file's record keys (default: the rollout's), ``rm_type``: its reward (an evaluation dataset's)."""
    if not run_generates(config, plugins):
        return lambda where, record: None
    registry = plugins.registry("reward_functions")
    fmt = fmt or PromptFormat.from_config(config)
    label_key, metadata_key = fmt.label_key, fmt.metadata_key

    def check(where: str, record: dict[str, Any]) -> None:
        metadata = record.get(metadata_key) if metadata_key else None
        metadata = metadata if isinstance(metadata, dict) else {}
        name = rm_type or metadata.get("rm_type") or config.rm_type
        if not name or name not in registry:
            return  # no reward, or an unknown one (reported by the component check)
        declared = registry.label_check(name)
        label = record.get(label_key) if label_key else None
        expected = declared(label, metadata) if declared else None
        if expected:
            entry, key = registry.entry(name), label_key or "''"
            raise DataError(
                f"{where}: label {label!r:.60} ({type(label).__name__}) is not what reward function "
                f"'{name}' (plugin '{entry.plugin}', {entry.distribution}) grades: it expects {expected}; "
                f"fix the label (--label-key {key}) or choose another --rm-type"
            )

    return check
