"""Reading a run's options: defaults, then a YAML config, then the command line.

Every problem (unknown keys and flags, values of the wrong type, bad choices, the batch
constraint, plugin checks) is collected, and `ConfigError` reports them all at once.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import yaml

from slime_core.config.accepted_flags import apply_aliases
from slime_core.config.config import Config, ConfigError
from slime_core.config.options import Option, OptionSet, flag_to_key, key_to_flag
from slime_core.config.resolve import resolve
from slime_core.config.validate import validate

PASSTHROUGH = ("sglang", "router", "vllm")  # undeclared --sglang-* / --router-* / --vllm-* options go to these tools
#: YAML mappings of pass-through options -> their tool (``router_args:`` as ``config.yaml`` writes
#: it; ``router:`` as a mapping too, while ``router: NAME`` is the ``--router`` option).
YAML_PASSTHROUGH = {"sglang": "sglang", "router": "router", "router_args": "router", "vllm": "vllm"}


class _Collected:
    """Values, their sources, pass-through options and errors gathered while reading."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self.passthrough: dict[str, dict[str, Any]] = {name: {} for name in PASSTHROUGH}
        self.errors: list[str] = []


def load_config(argv: list[str], options: OptionSet, plugins=None, checks=None) -> Config:
    """Resolve ``[CONFIG.yaml] [--flag value ...]`` into a validated, frozen `Config`.

    In order: defaults, YAML and command line merged; slime's aliases; every plugin's
    ``slime_resolve_config``, then slime's own (`slime_core.config.resolve`); the checks
    (slime's, every plugin's ``slime_validate_config``, and ``checks(config) -> list[str]``, the
    caller's own, if given), so that one `ConfigError` lists everything wrong at once; then the
    config is frozen (`Config.freeze`): nothing changes it after it was checked."""
    got = _Collected()
    config_path, cli = _scan_argv(argv, options, got)
    if config_path is not None:
        _read_yaml(Path(config_path), options, got)
    for key, (raw, where) in cli.items():
        _set(got, options[key], raw, where)
    values = {**options.defaults(), **got.values}
    sources = {key: got.sources.get(key, "default") for key in values}
    config = Config(values, sources, **got.passthrough)
    apply_aliases(config)
    if plugins is not None and not got.errors:
        plugins.resolve_config(config)
    resolve(config)
    errors = got.errors + validate(config, options)
    if plugins is not None and not errors:
        errors += plugins.validate_config(config)
    if checks is not None:
        errors += checks(config)
    if errors:
        raise ConfigError(errors)
    return config.freeze()


def load_overrides(argv: list[str], options: OptionSet) -> Config:
    """Defaults plus the declared flags in ``argv``, without a config file or run checks.

    For tools that need a few options but no run (``slime reward score --rm-type math``).
    """
    got = _Collected()
    path, cli = _scan_argv(argv, options, got)
    if path is not None:
        got.errors.append(f"unexpected argument '{path}'")
    for key, (raw, where) in cli.items():
        _set(got, options[key], raw, where)
    if got.errors:
        raise ConfigError(got.errors)
    return Config({**options.defaults(), **got.values}, got.sources, **got.passthrough).freeze()


# ---- the command line ------------------------------------------------------------------


def _scan_argv(argv: list[str], options: OptionSet, got: _Collected) -> tuple[str | None, dict]:
    """Split argv into the config path and ``{key: (raw value, source)}`` of declared flags."""
    config_path: str | None = None
    cli: dict[str, tuple[Any, str]] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("--"):
            if config_path is not None:
                got.errors.append(
                    f"unexpected argument '{token}': only one config file may be given (already '{config_path}')"
                )
            config_path = token
            continue
        flag, has_value, inline = token.partition("=")
        values = [inline] if has_value else []
        while i < len(argv) and not argv[i].startswith("--") and not _is_declared_flag_value_end(flag, options, values):
            values.append(argv[i])
            i += 1
        if len(values) > 1 and values[-1].endswith((".yaml", ".yml")) and flag_to_key(flag) not in options:
            values.pop()  # the config file after a pass-through flag's values
            i -= 1
        _take_flag(flag, values, options, cli, got)
    return config_path, cli


def _is_declared_flag_value_end(flag: str, options: OptionSet, values: list[str]) -> bool:
    """True when ``flag`` has all the values it takes, so the next token is the config path.

    A pass-through flag takes every value up to the next flag (``--sglang-cuda-graph-bs 1 2 4``),
    except a last ``.yaml``/``.yml`` one after the first, which is the config file."""
    key = flag_to_key(flag)
    option = options.options.get(key) or options.options.get(key.removeprefix("no_"))
    if option is None:
        return len(values) >= 1 and not _passthrough_tool(key)  # another undeclared flag takes at most one value
    if option.type is bool:
        return True
    return option.nargs is None and len(values) >= 1


def _take_flag(flag: str, values: list[str], options: OptionSet, cli: dict, got: _Collected) -> None:
    key = flag_to_key(flag)
    where = "command line"
    if key in options:
        option = options[key]
        if option.type is bool and values:
            got.errors.append(f"{flag} is a switch and takes no value; write {flag} or --no-{flag[2:]}")
        elif option.type is not bool and not values:
            got.errors.append(f"{flag} needs a value")
        else:
            cli[key] = (True if option.type is bool else values if option.nargs else values[0], where)
    elif key.startswith("no_") and key[3:] in options and options[key[3:]].type is bool:
        cli[key[3:]] = (False, where)
    elif _passthrough(key, _passthrough_value(values), got):
        pass
    else:
        got.errors.append(f"unknown option {flag}{_did_you_mean(key, options, flag=True)}")


def _passthrough_tool(key: str) -> str | None:
    """The tool an undeclared option is passed to (``sglang_*`` / ``router_*`` / ``vllm_*``), or None."""
    return next((tool for tool in PASSTHROUGH if key.startswith(tool + "_")), None)


def _passthrough_value(values: list[str]) -> Any:
    """A pass-through flag's value: True for a switch, its value, or the list of its values."""
    return True if not values else values[0] if len(values) == 1 else values


def _passthrough(key: str, value: Any, got: _Collected) -> bool:
    """Keep an undeclared ``sglang_*`` / ``router_*`` / ``vllm_*`` option for its tool; True if it was one."""
    tool = _passthrough_tool(key)
    if tool:
        got.passthrough[tool][key[len(tool) + 1 :]] = value
    return tool is not None


def _did_you_mean(key: str, options: OptionSet, flag: bool) -> str:
    """A hint for an unknown option: the package that declares it, or the nearest known one."""
    from slime_core.plugins.providers import OPTIONS

    if key in OPTIONS:
        return f": it comes with {OPTIONS[key]}, which is not installed: pip install {OPTIONS[key]}"
    close = difflib.get_close_matches(key, list(options.options), n=1, cutoff=0.6)
    if not close:
        return "; run `slime run --help` for the list"
    return f"; did you mean {key_to_flag(close[0]) if flag else close[0]}?"


# ---- the YAML config -------------------------------------------------------------------


def _read_yaml(path: Path, options: OptionSet, got: _Collected) -> None:
    if not path.is_file():
        got.errors.append(f"config file '{path}' does not exist; check the path")
        return
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
        lines = _key_lines(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        got.errors.append(f"{where}: not valid YAML ({getattr(exc, 'problem', exc)})")
        return
    if data is None:
        return
    if not isinstance(data, dict):
        got.errors.append(f"{path}: the config must be a mapping of option: value, not a {type(data).__name__}")
        return
    for raw_key, value in data.items():
        key = str(raw_key).replace("-", "_")
        where = f"{path}:{lines.get(str(raw_key), '?')}"
        tool = YAML_PASSTHROUGH.get(key)
        if tool and isinstance(value, dict):
            got.passthrough[tool].update({str(k).replace("-", "_"): v for k, v in value.items()})
        elif key in options:
            _set(got, options[key], value, where)
        elif not _passthrough(key, value, got):
            got.errors.append(f"{where}: unknown key '{raw_key}'{_did_you_mean(key, options, flag=False)}")


def _key_lines(text: str) -> dict[Any, int]:
    """Line number of every top-level key of a YAML mapping."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {key.value: key.start_mark.line + 1 for key, _ in node.value}


# ---- values ----------------------------------------------------------------------------


def _set(got: _Collected, option: Option, raw: Any, where: str) -> None:
    try:
        value = _convert(option, raw)
    except ValueError as exc:
        got.errors.append(f"{where}: {option.key}: {exc}")
        return
    got.values[option.key] = value
    got.sources[option.key] = where


def _convert(option: Option, raw: Any) -> Any:
    """Convert a raw value (a string from the command line, or a YAML value) to the option's type."""
    if raw is None:
        return None
    if option.nargs:
        items = raw if isinstance(raw, list) else [raw]
        return [_convert_one(option, item) for item in items]
    if isinstance(raw, list):
        raise ValueError(f"expected one {option.type.__name__}, got a list")
    return _convert_one(option, raw)


def _convert_one(option: Option, raw: Any) -> Any:
    kind = option.type
    value: Any
    if kind is bool:
        value = _to_bool(raw)
    elif kind is str:
        # a YAML mapping for a text option that holds JSON (--apply-chat-template-kwargs,
        # --multimodal-keys, ...) is that JSON, not Python's repr of it
        value = json.dumps(raw) if isinstance(raw, dict) else str(raw)
    elif isinstance(raw, bool):
        raise ValueError(f"expected {_describe(kind)}, got {raw}")
    else:
        try:
            value = kind(raw) if not (kind is int and isinstance(raw, float)) else _int_from_float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"expected {_describe(kind)}, got {raw!r}") from None
    if option.choices and value not in option.choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in option.choices], n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"{value!r} is not one of {', '.join(map(str, option.choices))}{hint}")
    return value


def _to_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


def _int_from_float(raw: float) -> int:
    if not raw.is_integer():
        raise ValueError
    return int(raw)


def _describe(kind: type) -> str:
    return {int: "an integer", float: "a number"}.get(kind, kind.__name__)
