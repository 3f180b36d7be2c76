"""Which registered implementation a config selects for each part of the run."""

from __future__ import annotations

from typing import Any

#: option -> registry kind; the option's value is a registered name (or a list of names).
COMPONENTS: dict[str, str] = {
    "train_backend": "train_backends",
    "rollout_engine": "rollout_engines",
    "data_source": "data_sources",
    "buffer_filter": "buffer_filters",
    "rollout_function": "rollout_functions",
    "generate_function": "generate_functions",
    "rm_type": "reward_functions",
    "dynamic_sampling_filter": "group_filters",
    "sample_filter": "sample_filters",
    "advantage_estimator": "advantage_estimators",
    "loss_type": "policy_losses",
    "router_middleware": "router_middlewares",
}


def selected_components(config) -> list[tuple[str, str, str]]:
    """``(option, kind, name)`` for every component the config selects."""
    rows = []
    for option, kind in COMPONENTS.items():
        value = config.get(option)
        for name in value if isinstance(value, list) else [value]:
            if name:
                rows.append((option, kind, name))
    return rows


def resolve_components(config, plugins) -> tuple[list[dict[str, Any]], list[str]]:
    """Look every selected component up; return a row per component and the errors."""
    rows, errors = [], []
    for option, kind, name in selected_components(config):
        registry = plugins.registry(kind)
        row = {"option": option, "kind": kind, "name": name, "plugin": None, "distribution": None}
        if name in registry:
            entry = registry.entry(name)
            row.update(plugin=entry.plugin, distribution=entry.distribution)
        else:
            errors.append(f"--{option.replace('_', '-')}: {registry.unknown_message(name)}")
        rows.append(row)
    return rows, errors
