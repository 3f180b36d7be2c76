"""One-off functions named by import path where a component name is expected.

``--rm-type my_pkg.rewards:score`` (or ``my_pkg.rewards.score``) registers that function as a
reward function named by its own path, exactly as if a plugin had registered it under that
name: the function has the native signature of its kind (``slime_core.hookspecs``). slime's
``--custom-*-path`` flags, whose functions have slime's signatures, are slime-compat's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_core import hookimpl

if TYPE_CHECKING:
    from slime_core.config import Config

#: option whose value may be an import path -> the registry kind it selects from
CUSTOM_PATHS: dict[str, str] = {
    "rm_type": "reward_functions",
    "generate_function": "generate_functions",
    "rollout_function": "rollout_functions",
    "eval_function": "eval_functions",
    "dynamic_sampling_filter": "group_filters",
    "buffer_filter": "buffer_filters",
    "data_source": "data_sources",
    "loss_type": "policy_losses",
}

PLUGIN_NAME = "custom-paths"


def is_import_path(value) -> bool:
    """Whether a component name is an import path (``module:attr`` or ``package.module.attr``)."""
    return isinstance(value, str) and (":" in value or "." in value)


class CustomPathsPlugin:
    """Registers each given import path in its registry, under the path itself."""

    def __init__(self, paths: dict[str, str]):
        self.paths = paths  # option -> import path

    def _register(self, kind: str, register) -> None:
        for option, path in self.paths.items():
            if CUSTOM_PATHS[option] == kind:
                register(path, path)  # the registry imports "module:attr" / "module.attr" on first use


def _registration_hook(kind: str):
    def hook(self, register):
        self._register(kind, register)

    hook.__name__ = f"slime_register_{kind}"
    return hookimpl(hook)


for _kind in set(CUSTOM_PATHS.values()):
    setattr(CustomPathsPlugin, f"slime_register_{_kind}", _registration_hook(_kind))


def apply_custom_paths(config: Config, plugins) -> None:
    """Register the import paths the config gives instead of registered names."""
    if PLUGIN_NAME in plugins.info:
        return
    given = {
        option: config.get(option)
        for option in CUSTOM_PATHS
        if is_import_path(config.get(option)) and config.get(option) not in plugins.registry(CUSTOM_PATHS[option])
    }
    if given:
        plugins.register_object(PLUGIN_NAME, CustomPathsPlugin(given))
