"""``--megatron-config-path``: slime's YAML of per-role Megatron settings.

slime's file has a top-level ``megatron`` list of entries ``{name, role: actor | critic,
overrides: {key: value}}`` (``args`` for ``overrides`` also read), at most one per role; each
role trains with the run's arguments changed by its overrides (``num_nodes`` /
``num_gpus_per_node`` ignored: placement follows the command line). Here, at config time, before
the checks run:

- the actor's overrides set our options of the same name (slime's option names are ours), the
  file winning over the command line as in slime;
- the critic's set the critic's own options (``lr`` -> ``--critic-lr``, ``load`` ->
  ``--critic-load``); any other critic key must equal the run's value, since the critic shares
  the actor's settings here.

A key with no option here, or a critic key that would differ from the actor's, is a config error
naming it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slime_core.config.config import Config

FLAG = "--megatron-config-path"
ROLES = ("actor", "critic")
#: keys slime ignores: the placement follows the command line
PLACEMENT_KEYS = ("num_nodes", "num_gpus_per_node")
#: the critic's keys that have an option of the critic's own here
CRITIC_OPTIONS = {"lr": "critic_lr", "load": "critic_load"}


def role_overrides(path: str) -> dict[str, dict[str, Any]]:
    """Each role's overrides in the file (a role without an entry has none); ValueError saying
    what is wrong with the file."""
    import yaml

    with open(path) as f:
        raw = yaml.safe_load(f) or {}
    entries = raw.get("megatron") if isinstance(raw, dict) else None
    example = "megatron: [{name: default, role: actor, overrides: {lr: 1.0e-6}}]"
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ValueError(f"it needs a top-level 'megatron' list of role entries, e.g. {example}")
    overrides = {}
    for entry in entries:
        role = entry.get("role")
        if role not in ROLES:
            raise ValueError(f"entry {entry.get('name')!r} has role {role!r}; a role is actor or critic")
        if role in overrides:
            raise ValueError(f"it has more than one entry with role {role}")
        values = entry.get("overrides") or entry.get("args") or {}
        if not isinstance(values, dict):
            raise ValueError(f"the {role} entry's overrides must be a mapping of settings")
        overrides[role] = {key: value for key, value in values.items() if key not in PLACEMENT_KEYS}
    return overrides


def apply_megatron_config(config: Config) -> None:
    """Set the options the file's overrides name (see the module docstring); a file that cannot
    be used, and keys that set nothing, are left to `megatron_config_problems`."""
    path = config.get("megatron_config_path")
    overrides = _readable(path)
    for role, values in (overrides or {}).items():
        for key, value in values.items():
            target = key if role == "actor" else CRITIC_OPTIONS.get(key)
            if target in config:
                setattr(config, target, _coerced(value, config.get(target)))
                config.sources[target] = f"{FLAG} {path} ({role} overrides '{key}')"


def megatron_config_problems(config: Config) -> list[str]:
    """Why the file cannot be used: unreadable or malformed, a key with no option here, or a
    critic key that would differ from the actor's."""
    path = config.get("megatron_config_path")
    if not path:
        return []
    try:
        overrides = role_overrides(path)
    except Exception as exc:  # unreadable, not YAML, or malformed
        return [f"{FLAG} {path}: cannot use it: {exc}"]
    problems = []
    for role, values in overrides.items():
        for key, value in values.items():
            if key not in config and not (role == "critic" and key in CRITIC_OPTIONS):
                problems.append(
                    f"{FLAG} {path}: the {role}'s '{key}' is no option here (slime would set it on args anyway); "
                    "drop it, or see docs/coming-from-slime.md for this slime's name of the setting"
                )
            elif role == "critic" and key not in CRITIC_OPTIONS and _coerced(value, config.get(key)) != config.get(key):
                problems.append(
                    f"{FLAG} {path}: the critic's '{key}: {value}' differs from the run's {config.get(key)!r}, but "
                    f"the critic shares the actor's --{key.replace('_', '-')} here (the critic's own settings: "
                    f"{', '.join(CRITIC_OPTIONS)}); drop it from the critic's overrides"
                )
    return problems


def _readable(path: str | None) -> dict[str, dict[str, Any]] | None:
    try:
        return role_overrides(path) if path else None
    except Exception:  # reported by megatron_config_problems
        return None


def _coerced(value, current):
    """YAML reads ``1e-5`` as a string: a number-like string becomes a number where the option
    holds one (or none yet)."""
    if not isinstance(value, str) or isinstance(current, bool) or not isinstance(current, (int, float, type(None))):
        return value
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if isinstance(current, int) and number.is_integer() else number
