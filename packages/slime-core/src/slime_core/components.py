"""Which registered implementation a config selects for each part of the run.

Only the parts a run uses are selected: a run whose rollout function needs no engine
(``sft``) or that replays saved rollouts uses no rollout backend, router, generate or eval
function, so a default naming a plugin that is not installed (``--rollout-backend sglang``
without slime-sglang) is no error there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slime_core.rollout.parts import needs_engines

if TYPE_CHECKING:
    from slime_core.config import Config

#: option -> registry kind; the option's value is a registered name (or a list of names).
COMPONENTS: dict[str, str] = {
    "train_backend": "train_backends",
    "data_source": "data_sources",
    "buffer_filter": "buffer_filters",
    "rollout_function": "rollout_functions",
    "rollout_backend": "rollout_backends",
    "router": "routers",
    "generate_function": "generate_functions",
    "sample_hook": "sample_hooks",
    "all_groups_hook": "all_groups_hooks",
    "eval_function": "eval_functions",
    "rm_type": "reward_functions",
    "dynamic_sampling_filter": "group_filters",
    "sample_filter": "sample_filters",
    "advantage_estimator": "advantage_estimators",
    "loss_type": "policy_losses",
    "tis_mode": "tis_functions",
    "pg_loss_reducer": "pg_loss_reducers",
    "router_middleware": "router_middlewares",
    "reward_post_process": "reward_post_processors",
    "train_data_converter": "train_data_converters",
}
#: Options that name parts only a run that generates (with engines) uses.
ENGINE_SIDE = {
    "rollout_backend",
    "router",
    "generate_function",
    "eval_function",
    "router_middleware",
    "dynamic_sampling_filter",
    "sample_hook",
    "all_groups_hook",
}


def selected_components(config: Config, generates: bool = True) -> list[tuple[str, str, str]]:
    """``(option, kind, name)`` for every component the config selects (with ``generates``
    False, none of the `ENGINE_SIDE` ones)."""
    rows = []
    for option, kind in COMPONENTS.items():
        if option in ENGINE_SIDE and not generates:
            continue
        if option == "eval_function" and not config.get("eval_prompt_data"):
            continue
        value = config.get(option)
        for name in value if isinstance(value, list) else [value]:
            if name:
                rows.append((option, kind, name))
    return rows


def run_generates(config: Config, plugins) -> bool:
    """Whether the run starts rollout engines: it generates its rollouts (not replayed ones)
    with a rollout function that needs engines. Unknown rollout functions count as generating."""
    if config.get("debug_train_only") or config.get("load_debug_rollout_data"):
        return False
    registry = plugins.registry("rollout_functions")
    name = config.get("rollout_function")
    return name not in registry or needs_engines(registry.get(name))


def resolve_components(config: Config, plugins) -> tuple[list[dict[str, Any]], list[str]]:
    """Look every component the run uses up; return a row per component and the errors."""
    rows, errors = [], []
    for option, kind, name in selected_components(config, run_generates(config, plugins)):
        registry = plugins.registry(kind)
        row = {"option": option, "kind": kind, "name": name, "plugin": None, "distribution": None}
        if name in registry:
            entry = registry.entry(name)
            row.update(plugin=entry.plugin, distribution=entry.distribution)
        else:
            errors.append(f"--{option.replace('_', '-')}: {registry.unknown_message(name)}")
        rows.append(row)
    return rows, errors
