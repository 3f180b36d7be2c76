"""Flags accepted so that launch scripts written for THUDM/slime (and the Megatron-LM flags they
pass) run unchanged, where this slime has no option of that name.

Each accepted flag either sets one of our options (an alias with the same meaning), is checked
against the model (an architecture flag must agree with ``--hf-checkpoint``'s config.json,
which is what the backends build the model from), or changes nothing here; then it carries the
reason, which ``slime run`` prints for every such flag the user set (never dropped in silence).
The tables are in `slime_flags` (slime's own flags) and `megatron_lm_flags`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slime_core.config.options import OptionSet, flag_to_key, key_to_flag

if TYPE_CHECKING:
    from slime_core.config import Config


@dataclass(frozen=True)
class Accepted:
    """One accepted flag and what it does here."""

    flag: str  # "--num-layers"
    type: type = bool  # bool: a switch
    reason: str | None = None  # why it changes nothing here (None: it acts, as alias or check)
    alias: str | None = None  # the option key it sets, with the same meaning
    hf_keys: tuple[str, ...] = ()  # config.json keys it must equal (the first present is compared)
    hf_value: Any = None  # for a switch: the value config.json must hold when it is given
    nargs: str | None = None

    @property
    def key(self) -> str:
        return flag_to_key(self.flag)

    def status(self) -> str:
        """What the flag does here, as `slime run --help-all` and docs/coming-from-slime.md say it."""
        if self.alias:
            return f"mapped to {key_to_flag(self.alias)}"
        if self.hf_keys:
            return f"checked against --hf-checkpoint's config.json ({' or '.join(self.hf_keys)})"
        return f"accepted, no effect here: {self.reason}"


def accepted_flags() -> dict[str, Accepted]:
    """Every accepted flag by option key: slime's, then Megatron-LM's."""
    from slime_core.config.megatron_lm_flags import MEGATRON_LM_FLAGS
    from slime_core.config.slime_flags import SLIME_FLAGS

    return {entry.key: entry for entry in SLIME_FLAGS + MEGATRON_LM_FLAGS}


def declare(options: OptionSet, table: tuple[Accepted, ...], group: str) -> None:
    """Declare the flags of ``table`` as compatibility options (switches default to off, values
    to None), which ``slime run --help-all`` lists."""
    for entry in table:
        options.add(
            entry.flag,
            type=entry.type,
            default=False if entry.type is bool else None,
            nargs=entry.nargs,
            help=entry.status(),
            group=group,
            compatibility=True,
        )


def _given(config: Config, key: str) -> bool:
    return key in config and config.sources.get(key, "default") != "default"


def apply_aliases(config: Config) -> None:
    """Copy each alias the user gave to its option, unless that option was given too; a lone
    ``--eval-prompt-data PATH`` is named ``aime``, as slime names it."""
    eval_data = config.get("eval_prompt_data")
    if eval_data and len(eval_data) == 1:
        config.eval_prompt_data = ["aime", *eval_data]
    for entry in accepted_flags().values():
        if entry.alias and _given(config, entry.key) and not _given(config, entry.alias):
            setattr(config, entry.alias, config.get(entry.key))
            config.sources[entry.alias] = f"{entry.flag} ({config.sources[entry.key]})"


def no_effect_notes(config: Config) -> list[str]:
    """One line for each accepted flag the user gave that changes nothing here."""
    return [
        f"{entry.flag}: accepted, no effect here: {entry.reason}"
        for entry in accepted_flags().values()
        if entry.reason and _given(config, entry.key)
    ]


def architecture_problems(config: Config) -> list[str]:
    """Each architecture flag the user gave that disagrees with ``--hf-checkpoint``'s config.json.

    An unreadable or missing checkpoint is not a problem here: the model-directory check
    reports it."""
    model = read_model_config(config.get("hf_checkpoint"))
    if model is None:
        return []
    problems = []
    for entry in accepted_flags().values():
        if entry.hf_keys and _given(config, entry.key):
            problem = _mismatch(entry, config.get(entry.key), model)
            if problem:
                problems.append(
                    f"{problem} in --hf-checkpoint {config.hf_checkpoint}/config.json; the model is "
                    f"built from config.json, so fix {entry.flag} (or use the checkpoint it describes)"
                )
    return problems


def model_config(config: Config) -> tuple[dict, str] | None:
    """The model a run trains, as config.json's keys, and where they come from: ``--hf-checkpoint``'s
    config.json (`read_model_config`), or, when it is not on this machine (a launch script written for
    another one), the keys its architecture flags (slime's ``MODEL_ARGS``: ``--num-layers`` ...)
    give; None when neither is there. For checks of the model's sizes before a run starts."""
    path = config.get("hf_checkpoint")
    model = read_model_config(path)
    if model is not None:
        return model, f"--hf-checkpoint {path}"
    given = {
        entry.hf_keys[0]: config.get(entry.key)
        for entry in accepted_flags().values()
        if entry.hf_keys and entry.type is not bool and _given(config, entry.key)
    }
    if not given:
        return None
    return given, f"the model of the architecture flags (--hf-checkpoint {path} is not on this machine)"


def read_model_config(path: str | None) -> dict | None:
    """The model's config.json, or None; a multimodal model's ``text_config`` and the rope
    settings (``rope_parameters`` since transformers 5, ``rope_scaling`` before) are merged over
    the top level."""
    try:
        model = json.loads((Path(path) / "config.json").read_text()) if path else None
    except (OSError, ValueError):
        return None
    if not isinstance(model, dict):
        return None
    for nested in ("text_config", "rope_parameters", "rope_scaling"):
        if isinstance(model.get(nested), dict):
            model = {**model, **model[nested]}
    return model


def _mismatch(entry: Accepted, value: Any, model: dict) -> str | None:
    hf_key = next((key for key in entry.hf_keys if key in model), None)
    if hf_key is None or value is False:
        return None
    expected = entry.hf_value if entry.type is bool else value
    actual = model[hf_key]
    same = (
        abs(float(expected) - float(actual)) <= 1e-9 * max(1.0, abs(float(actual)))
        if isinstance(actual, (int, float)) and not isinstance(actual, bool)
        else expected == actual
    )
    if same:
        return None
    shown = entry.flag if entry.type is bool else f"{entry.flag} {value}"
    return f"{shown} says {hf_key} = {expected!r}, but it is {actual!r}"
