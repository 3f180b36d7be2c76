"""Declared options: what `slime run` accepts on the command line and in YAML configs.

Each package declares its options through the ``slime_add_options`` hook. An option has one
flag (``--rollout-batch-size``), whose config key is the flag without dashes, with
underscores (``rollout_batch_size``). An option that acts only in some configurations says
when (``acts_when``, with the ``no_effect`` reason), so that `slime_core.config.no_effect`
warns about it where it does nothing, whichever package declared it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
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
    compatibility: bool = False  # accepted only so slime's and Megatron-LM's launch scripts run (--help-all)

    @property
    def key(self) -> str:
        return flag_to_key(self.flag)


def flag_to_key(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def key_to_flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _check_rule(flag: str, acts_when, no_effect) -> None:
    if (acts_when is None) != (no_effect is None):
        raise ValueError(f"option {flag}: give acts_when and no_effect together (when it acts, and why not otherwise)")


class OptionSet:
    """All declared options, by config key."""

    def __init__(self):
        self.options: dict[str, Option] = {}
        #: key -> (acts_when(config), no_effect reason), in the order the rules were given
        self.rules: dict[str, tuple[Callable[[Any], Any], str]] = {}
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
        acts_when: Callable[[Any], Any] | None = None,
        no_effect: str | None = None,
        compatibility: bool = False,
    ) -> None:
        """Declare an option; declaring the same flag twice is an error naming both plugins.

        ``acts_when(config)`` is false in the configurations where the option changes nothing;
        a user who sets it there is warned with ``no_effect`` (why, and what would make it act).
        ``compatibility`` options are listed only by ``slime run --help-all``."""
        if not flag.startswith("--") or flag != flag.lower() or "_" in flag:
            raise ValueError(f"option {flag!r}: write flags as --lower-case-with-dashes")
        if type not in _TYPES:
            raise ValueError(f"option {flag}: type must be one of str, int, float, bool (got {type!r})")
        if nargs not in (None, "+"):
            raise ValueError(f"option {flag}: nargs must be None or '+'")
        _check_rule(flag, acts_when, no_effect)
        plugin = self.current_plugin or "unknown"
        option = Option(
            flag,
            type,
            default,
            help,
            group,
            plugin,
            tuple(choices) if choices else None,
            nargs,
            required,
            compatibility,
        )
        if option.key in self.options:
            first = self.options[option.key]
            raise ValueError(f"option {flag} is declared twice: by plugin '{first.plugin}' and by plugin '{plugin}'")
        self.options[option.key] = option
        if acts_when is not None:
            self.rules[option.key] = (acts_when, no_effect)

    def add_rule(self, key: str, acts_when: Callable[[Any], Any], no_effect: str) -> None:
        """Say when an option declared already acts (see `add`), e.g. from a table of rules."""
        if key not in self.options:
            raise ValueError(f"no-effect rule for {key_to_flag(key)}: no such option is declared")
        _check_rule(key_to_flag(key), acts_when, no_effect)
        self.rules[key] = (acts_when, no_effect)

    def __contains__(self, key: str) -> bool:
        return key in self.options

    def __getitem__(self, key: str) -> Option:
        return self.options[key]

    def defaults(self) -> dict[str, Any]:
        return {key: option.default for key, option in self.options.items()}

    def help_parser(self, prog: str, everything: bool = False) -> argparse.ArgumentParser:
        """An argparse parser used only to print ``slime run --help``, grouped by heading.

        It lists the options a user sets; ``everything`` (``--help-all``) adds the flags accepted
        for slime's and Megatron-LM's launch scripts."""
        more = sum(option.compatibility for option in self.options.values())
        parser = argparse.ArgumentParser(
            prog=prog,
            usage="%(prog)s [CONFIG.yaml] [--option VALUE ...]",
            description="Run RL training. Options come from a YAML CONFIG and the command line (which wins). "
            "Flags starting with --sglang-, --router- or --vllm- that slime does not declare are passed to SGLang, "
            "the router and vLLM.",
            epilog=None
            if everything or not more
            else f"`{prog} --help-all` also lists the {more} flags accepted from slime's and Megatron-LM's launch "
            "scripts.",
        )
        parser.add_argument("config", nargs="?", help="YAML config file")
        parser.add_argument("--help-all", action="help", help="show every option, with the compatibility flags")
        groups: dict[str, argparse._ArgumentGroup] = {}
        for option in self.options.values():
            if option.compatibility and not everything:
                continue
            group = groups.setdefault(option.group, parser.add_argument_group(option.group))
            kwargs: dict[str, Any] = {"help": f"{option.help} (default: {option.default})"}
            if option.type is bool:
                kwargs["action"] = argparse.BooleanOptionalAction
            else:
                kwargs.update(metavar=option.type.__name__.upper(), nargs=option.nargs, choices=option.choices)
            group.add_argument(option.flag, **kwargs)
        return parser
