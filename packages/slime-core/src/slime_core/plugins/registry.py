"""Named implementations registered by plugins, looked up by the names a config gives."""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from typing import Any

from slime_core.plugins import providers

#: Registry kind -> human-readable name of one entry. Each kind is filled by the hook
#: ``slime_register_<kind>`` and selected by a config option.
KINDS: dict[str, str] = {
    "train_backends": "train backend",
    "critics": "critic",
    "rollout_backends": "rollout backend",
    "routers": "router",
    "rollout_engines": "rollout engine",
    "reward_functions": "reward function",
    "group_filters": "group filter",
    "sample_filters": "sample filter",
    "buffer_filters": "buffer filter",
    "advantage_estimators": "advantage estimator",
    "policy_losses": "policy loss",
    "tis_functions": "TIS function",
    "pg_loss_reducers": "pg-loss reducer",
    "data_sources": "data source",
    "rollout_functions": "rollout function",
    "generate_functions": "generate function",
    "sample_hooks": "sample hook",
    "all_groups_hooks": "all-groups hook",
    "eval_functions": "eval function",
    "router_middlewares": "router middleware",
    "reward_post_processors": "reward post-processor",
    "train_data_converters": "train-data converter",
    "checkpoint_readers": "checkpoint reader",
}


class RegistryError(ValueError):
    """A name registered twice, or a name that nothing registered."""


@dataclass
class Entry:
    """One registered implementation and the plugin that registered it."""

    name: str
    target: Any  # the object, or a "module:attribute" reference resolved on first use
    plugin: str  # plugin name, e.g. "rewards"
    distribution: str  # e.g. "slime-rewards 0.1.0", or "local module"
    # reward functions only: the labels it grades, ``check(label, metadata) -> None | what it
    # expects`` (or its "module:attribute"), checked on every record before a run starts;
    # None: not declared, not checked
    label: Any = None


class Registry:
    """The implementations of one kind (e.g. reward functions), by name."""

    def __init__(self, kind: str):
        self.kind = kind
        self.label = KINDS[kind]
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, target: Any, plugin: str, distribution: str, label: Any = None) -> None:
        """Add ``name``; registering a name twice is an error that names both plugins.
        ``label``: what a reward function grades (`Entry.label`)."""
        if not isinstance(name, str) or not name:
            raise RegistryError(
                f"plugin '{plugin}' ({distribution}) registered a {self.label} with an invalid name {name!r}"
            )
        if label is not None and self.kind != "reward_functions":
            raise RegistryError(
                f"plugin '{plugin}' ({distribution}) declared a label check for {self.label} '{name}'; "
                "only reward functions declare one"
            )
        if name in self._entries:
            first = self._entries[name]
            raise RegistryError(
                f"{self.label} '{name}' is registered twice: by plugin '{first.plugin}' ({first.distribution}) "
                f"and by plugin '{plugin}' ({distribution}); uninstall one, or block it with "
                f"SLIME_BLOCK_PLUGINS={plugin}"
            )
        self._entries[name] = Entry(name, target, plugin, distribution, label)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def entry(self, name: str) -> Entry:
        """The entry for ``name``, or an error listing what is available."""
        if name in self._entries:
            return self._entries[name]
        raise RegistryError(self.unknown_message(name))

    def unknown_message(self, name: str) -> str:
        available = self.names()
        listed = ", ".join(available) if available else "none: no installed plugin registers one"
        provider = providers.COMPONENTS.get((self.kind, name))
        if provider:
            return f"{providers.not_installed(f'{self.label} {name!r}', provider)} (installed: {listed})"
        close = difflib.get_close_matches(name, available, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"unknown {self.label} '{name}'; {hint}available: {listed}"

    def get(self, name: str) -> Any:
        """The implementation registered as ``name``, importing it if it was a reference."""
        entry = self.entry(name)
        if isinstance(entry.target, str):
            entry.target = resolve_reference(entry.target, f"{self.label} '{name}' of plugin '{entry.plugin}'")
        return entry.target

    def label_check(self, name: str):
        """The label check ``name`` declared (`Entry.label`, imported on first use), or None."""
        entry = self.entry(name)
        if isinstance(entry.label, str):
            entry.label = resolve_reference(
                entry.label, f"the label check of {self.label} '{name}' of plugin '{entry.plugin}'"
            )
        return entry.label


def resolve_reference(ref: str, what: str) -> Any:
    """Import ``"package.module:attribute"`` (or ``"package.module.attribute"``)."""
    module_name, sep, attribute = ref.partition(":")
    if not sep:
        module_name, _, attribute = ref.rpartition(".")
    if not module_name or not attribute:
        raise RegistryError(f"{what}: '{ref}' is not a dotted path; write it as package.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RegistryError(
            f"{what}: cannot import module '{module_name}' ({exc}); is it installed and on PYTHONPATH?"
        ) from exc
    try:
        obj = module
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except AttributeError as exc:
        raise RegistryError(f"{what}: module '{module_name}' has no attribute '{attribute}'") from exc
    return obj
