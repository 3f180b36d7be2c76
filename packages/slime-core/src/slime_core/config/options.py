"""Declared options: what `slime run` accepts on the command line and in YAML configs.

Each package declares its options through the ``slime_add_options`` hook. An option has one
flag (``--rollout-batch-size``), whose config key is the flag without dashes, with
underscores (``rollout_batch_size``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

_TYPES = (str, int, float, bool)


@dataclass(frozen=True)
class Option:
    """One declared option."""

    flag: str  # "--rollout-batch-size"
    type: type  # str, int, float or bool; for nargs="+" the type of each item
    default: Any
    help: str
    group: str  # heading in `slime run --help`
    plugin: str  # the plugin that declared it
    choices: tuple | None = None
    nargs: str | None = None  # "+" for a list of values
    required: bool = False

    @property
    def key(self) -> str:
        return flag_to_key(self.flag)


def flag_to_key(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def key_to_flag(key: str) -> str:
    return "--" + key.replace("_", "-")


class OptionSet:
    """All declared options, by config key."""

    def __init__(self):
        self.options: dict[str, Option] = {}
        self.current_plugin: str | None = None  # set by the plugin manager around each hook call

    def add(
        self,
        flag: str,
        *,
        type: type = str,
        default: Any = None,
        help: str = "",
        group: str = "general",
        choices: list | tuple | None = None,
        nargs: str | None = None,
        required: bool = False,
    ) -> None:
        """Declare an option; declaring the same flag twice is an error naming both plugins."""
        if not flag.startswith("--") or flag != flag.lower() or "_" in flag:
            raise ValueError(f"option {flag!r}: write flags as --lower-case-with-dashes")
        if type not in _TYPES:
            raise ValueError(f"option {flag}: type must be one of str, int, float, bool (got {type!r})")
        if nargs not in (None, "+"):
            raise ValueError(f"option {flag}: nargs must be None or '+'")
        plugin = self.current_plugin or "unknown"
        option = Option(flag, type, default, help, group, plugin, tuple(choices) if choices else None, nargs, required)
        if option.key in self.options:
            first = self.options[option.key]
            raise ValueError(f"option {flag} is declared twice: by plugin '{first.plugin}' and by plugin '{plugin}'")
        self.options[option.key] = option

    def __contains__(self, key: str) -> bool:
        return key in self.options

    def __getitem__(self, key: str) -> Option:
        return self.options[key]

    def defaults(self) -> dict[str, Any]:
        return {key: option.default for key, option in self.options.items()}

    def help_parser(self, prog: str) -> argparse.ArgumentParser:
        """An argparse parser used only to print ``slime run --help``, grouped by heading."""
        parser = argparse.ArgumentParser(
            prog=prog,
            description="Run RL training. Options come from a YAML CONFIG and the command line (which wins). "
            "Flags starting with --sglang- or --router- that slime does not declare are passed to SGLang "
            "and to the router.",
        )
        parser.add_argument("config", nargs="?", help="YAML config file")
        groups: dict[str, argparse._ArgumentGroup] = {}
        for option in self.options.values():
            group = groups.setdefault(option.group, parser.add_argument_group(option.group))
            kwargs: dict[str, Any] = {"help": f"{option.help} (default: {option.default})"}
            if option.type is bool:
                kwargs["action"] = argparse.BooleanOptionalAction
            else:
                kwargs.update(metavar=option.type.__name__.upper(), nargs=option.nargs, choices=option.choices)
            group.add_argument(option.flag, **kwargs)
        return parser
