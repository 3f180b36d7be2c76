"""slime's ``--custom-*-path`` flags, kept working as one-off plugins.

``--custom-rm-path my_pkg.rewards.score`` registers ``my_pkg.rewards.score`` as a reward
function named by its own dotted path and selects it, exactly as if a plugin had
registered it and the user had passed ``--rm-type my_pkg.rewards.score``.
"""

from __future__ import annotations

from slime_core import hookimpl

#: path option -> (registry kind, the option that selects a component of that kind)
CUSTOM_PATHS: dict[str, tuple[str, str]] = {
    "custom_rm_path": ("reward_functions", "rm_type"),
    "custom_generate_function_path": ("generate_functions", "generate_function"),
    "rollout_function_path": ("rollout_functions", "rollout_function"),
    "eval_function_path": ("eval_functions", "eval_function"),
    "dynamic_sampling_filter_path": ("group_filters", "dynamic_sampling_filter"),
    "buffer_filter_path": ("buffer_filters", "buffer_filter"),
    "data_source_path": ("data_sources", "data_source"),
    "custom_loss_function_path": ("policy_losses", "loss_type"),
}

PLUGIN_NAME = "custom-paths"


class CustomPathsPlugin:
    """Registers each given dotted path in its registry, under the path itself."""

    def __init__(self, paths: dict[str, str]):
        self.paths = paths  # path option -> dotted path

    def _register(self, kind: str, register) -> None:
        for option, path in self.paths.items():
            if CUSTOM_PATHS[option][0] == kind:
                register(path, path)


def _registration_hook(kind: str):
    def hook(self, register):
        self._register(kind, register)

    hook.__name__ = f"slime_register_{kind}"
    return hookimpl(hook)


for _kind in {kind for kind, _ in CUSTOM_PATHS.values()}:
    setattr(CustomPathsPlugin, f"slime_register_{_kind}", _registration_hook(_kind))


def apply_custom_paths(config, plugins) -> None:
    """Register the config's ``--custom-*-path`` functions and select them."""
    given = {option: config.get(option) for option in CUSTOM_PATHS if config.get(option)}
    if not given:
        return
    plugins.register_object(PLUGIN_NAME, CustomPathsPlugin(given))
    for option, path in given.items():
        setattr(config, CUSTOM_PATHS[option][1], path)
