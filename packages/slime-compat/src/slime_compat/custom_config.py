"""``--custom-config-path``: a YAML file of extra settings for slime's functions.

slime reads the file after its own argument checks and sets every key on ``args``, where the
user's functions read it (``args.max_turns``); a key that names a flag overrides the flag's
value, with a warning. Here the extra keys are set on the run's `SlimeArgs` when it is made
(`slime_compat.args.slime_args`), in the driver and in the train ranks alike. A key that names one of this run's
options is a config error instead: options are
validated before anything starts, and a value set afterwards would skip those checks; give it
as the flag, or in the run's YAML config. Two such keys are fine: one whose value is the option's
(nothing is overridden), and one whose option holds the adapter a ``--*-path`` flag selected
(``tis_mode`` with ``--custom-tis-function-path``): its value is the user's function's argument.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slime_core.config.config import Config

FLAG = "--custom-config-path"


def custom_settings(path: str) -> dict[str, Any]:
    """The file's settings; a ValueError unless it is a YAML mapping (an empty file is none)."""
    import yaml

    with open(path) as f:
        settings = yaml.safe_load(f) or {}
    if not isinstance(settings, dict):
        raise ValueError(f"it holds a YAML {type(settings).__name__}; write it as 'key: value' lines")
    return settings


def custom_config_problems(config: Config) -> list[str]:
    """Why the file cannot be used: unreadable, not a mapping, or setting one of our options."""
    import yaml

    path = config.get("custom_config_path")
    if not path:
        return []
    try:
        settings = custom_settings(path)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        return [f"{FLAG} {path}: cannot read it: {exc}"]
    return [
        f"{FLAG} {path} sets '{key}', which is an option here (--{key.replace('_', '-')}, now {config.get(key)!r}); "
        "slime would override the option with it after its checks: give it as the flag or in the run's YAML instead"
        for key, value in settings.items()
        if key in config and value != config.get(key) and not _holds_an_adapter(config, key)
    ]


def _holds_an_adapter(config: Config, key: str) -> bool:
    """Whether option ``key`` holds the slime-compat adapter a ``--*-path`` flag selected (e.g.
    ``tis_mode`` = ``slime.custom_tis``): the file's value is then an argument of the user's
    function, as in slime (``args.tis_mode``), and the option keeps the adapter."""
    from slime_compat.hooks import HOOKS

    return any(hook.selects and hook.selects[0] == key and config.get(hook.key) for hook in HOOKS)
