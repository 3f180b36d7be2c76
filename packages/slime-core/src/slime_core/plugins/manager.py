"""Loading plugins and calling their hooks through one small typed facade.

Plugins come from three places, in this order:

1. the core's built-in plugin (``slime_core.builtins``), always;
2. modules listed in the ``slime`` entry-point group of installed distributions, unless
   ``SLIME_DISABLE_PLUGIN_AUTOLOAD`` is set;
3. modules named with ``-p module`` (or ``SLIME_PLUGINS=mod1,mod2``, which is how Ray
   workers see the driver's ``-p`` plugins).

``SLIME_BLOCK_PLUGINS=name1,name2`` blocks plugins by name; ``SLIME_TRACE_HOOKS=1``
prints every hook call and the plugin it runs to stderr.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Iterable

import pluggy

from slime_core import hookspecs
from slime_core.plugins.registry import KINDS, Registry, RegistryError

ENV_DISABLE_AUTOLOAD = "SLIME_DISABLE_PLUGIN_AUTOLOAD"
ENV_BLOCK = "SLIME_BLOCK_PLUGINS"
ENV_TRACE = "SLIME_TRACE_HOOKS"
ENV_PLUGINS = "SLIME_PLUGINS"
ENTRY_POINT_GROUP = "slime"
CORE_PLUGIN = "core"


class PluginError(RuntimeError):
    """A plugin failed to load, or failed inside one of its hooks."""


@dataclass
class PluginInfo:
    """Where a loaded plugin comes from."""

    name: str
    module: Any
    distribution: str | None  # e.g. "slime-rewards"; None for a local module
    version: str | None

    @property
    def label(self) -> str:
        if self.distribution is None:
            return "local module"
        return f"{self.distribution} {self.version}"


def _env_list(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


class Plugins:
    """The loaded plugins: their registries, options and lifecycle hooks."""

    def __init__(self, modules: Iterable[str] = (), autoload: bool | None = None):
        self._pm = pluggy.PluginManager("slime")
        self._pm.add_hookspecs(hookspecs)
        self.info: dict[str, PluginInfo] = {}
        self.blocked = set(_env_list(ENV_BLOCK))
        self._trace = bool(os.environ.get(ENV_TRACE))
        self._registries: dict[str, Registry] = {}
        if CORE_PLUGIN in self.blocked:
            raise PluginError(f"{ENV_BLOCK} names '{CORE_PLUGIN}', the built-in plugin, which cannot be blocked")
        self._add(CORE_PLUGIN, importlib.import_module("slime_core.builtins"), "slime-core", _version("slime-core"))
        if autoload if autoload is not None else not os.environ.get(ENV_DISABLE_AUTOLOAD):
            self._load_entry_points()
        for module_name in [*modules, *_env_list(ENV_PLUGINS)]:
            self.load_module(module_name)
        self._check()

    # ---- loading -------------------------------------------------------------------

    def _load_entry_points(self) -> None:
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist else None
            if ep.name in self.blocked or (ep.name == CORE_PLUGIN and dist == "slime-core"):
                continue
            if ep.name in self.info:
                raise PluginError(
                    f"two installed distributions register a slime plugin named '{ep.name}': "
                    f"{self.info[ep.name].label} and {dist}; uninstall one"
                )
            try:
                module = ep.load()
            except Exception as exc:
                raise PluginError(
                    f"plugin '{ep.name}' from {dist} failed to import ({type(exc).__name__}: {exc}); "
                    f"reinstall it, or block it with {ENV_BLOCK}={ep.name}"
                ) from exc
            self._add(ep.name, module, dist, ep.dist.version if ep.dist else None)

    def load_module(self, module_name: str) -> None:
        """Load a local plugin module by its import name (``-p module``)."""
        if module_name in self.blocked or module_name in self.info:
            return
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise PluginError(
                f"-p {module_name}: cannot import it ({exc}); check the module name and that its folder is on PYTHONPATH"
            ) from exc
        except Exception as exc:
            raise PluginError(f"-p {module_name}: importing it failed ({type(exc).__name__}: {exc})") from exc
        dist = _distribution_of(module_name)
        self._add(module_name, module, dist, _version(dist) if dist else None)

    def register_object(self, name: str, plugin: Any) -> None:
        """Register an in-process plugin object (used for one-off ``--custom-*-path`` functions)."""
        self._add(name, plugin, None, None)
        self._check()

    def unregister(self, name: str) -> None:
        """Remove a plugin (tests use this in ``finally``); registries are rebuilt on next use."""
        info = self.info.pop(name)
        self._pm.unregister(info.module)
        self._registries.clear()

    def _add(self, name: str, module: Any, dist: str | None, version: str | None) -> None:
        self._pm.register(module, name=name)
        self.info[name] = PluginInfo(name, module, dist, version)
        self._registries.clear()

    def _check(self) -> None:
        try:
            self._pm.check_pending()
        except pluggy.PluginValidationError as exc:
            raise PluginError(
                f"plugin '{self._pm.get_name(exc.plugin)}' implements a hook slime does not define: {exc}; "
                "check the hook name against slime_core.hookspecs"
            ) from exc

    # ---- calling hooks -------------------------------------------------------------

    def _impls(self, hook_name: str) -> list:
        """A hook's implementations in call order (pluggy's: last registered first)."""
        return list(reversed(getattr(self._pm.hook, hook_name).get_hookimpls()))

    def _invoke(self, impl, hook_name: str, kwargs: dict[str, Any]) -> Any:
        """Call one implementation, naming its plugin if it raises."""
        if self._trace:
            print(f"slime hook: {hook_name} -> plugin '{impl.plugin_name}'", file=sys.stderr)
        try:
            return impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
        except (PluginError, RegistryError):
            raise
        except Exception as exc:
            info = self.info[impl.plugin_name]
            raise PluginError(f"plugin '{info.name}' ({info.label}) failed in {hook_name}: {type(exc).__name__}: {exc}") from exc

    def _call(self, hook_name: str, **kwargs: Any) -> list[Any]:
        """Call every implementation of a hook; return the results that are not None."""
        results = (self._invoke(impl, hook_name, kwargs) for impl in self._impls(hook_name))
        return [result for result in results if result is not None]

    def hook_names(self, name: str) -> list[str]:
        """The hooks a plugin implements."""
        callers = self._pm.get_hookcallers(self.info[name].module) or []
        return sorted(caller.name for caller in callers)

    # ---- registries ----------------------------------------------------------------

    def registry(self, kind: str) -> Registry:
        """The registry of one kind, filled from every plugin on first use."""
        if kind not in KINDS:
            raise KeyError(f"unknown registry kind '{kind}'; kinds are {sorted(KINDS)}")
        if kind not in self._registries:
            registry = Registry(kind)
            hook_name = f"slime_register_{kind}"
            for impl in self._impls(hook_name):
                info = self.info[impl.plugin_name]

                def register(name, target, _info=info):
                    registry.register(name, target, _info.name, _info.label)

                self._invoke(impl, hook_name, {"register": register})
            self._registries[kind] = registry
        return self._registries[kind]

    def registrations(self, name: str) -> dict[str, list[str]]:
        """What one plugin registers, by kind (only kinds where it registers something)."""
        out = {}
        for kind in KINDS:
            registry = self.registry(kind)
            names = [n for n in registry.names() if registry.entry(n).plugin == name]
            if names:
                out[kind] = names
        return out

    def describe(self) -> list[dict[str, Any]]:
        """Name, distribution, version, hooks and registrations of every plugin."""
        return [
            {
                "name": info.name,
                "distribution": info.distribution,
                "version": info.version,
                "hooks": self.hook_names(info.name),
                "registers": self.registrations(info.name),
            }
            for info in self.info.values()
        ]

    # ---- options and commands ------------------------------------------------------

    def add_options(self, options) -> None:
        for impl in self._impls("slime_add_options"):
            options.current_plugin = impl.plugin_name
            self._invoke(impl, "slime_add_options", {"options": options})
        options.current_plugin = None

    def validate_config(self, config) -> list[str]:
        errors: list[str] = []
        for result in self._call("slime_validate_config", config=config):
            errors.extend(result)
        return errors

    def add_commands(self, subparsers) -> None:
        self._call("slime_add_commands", subparsers=subparsers)

    # ---- lifecycle -----------------------------------------------------------------

    def before_run(self, config) -> None:
        self._call("slime_before_run", config=config)

    def after_run(self, config, status: str) -> None:
        self._call("slime_after_run", config=config, status=status)

    def before_rollout(self, rollout_id: int, config) -> None:
        self._call("slime_before_rollout", rollout_id=rollout_id, config=config)

    def after_rollout(self, rollout_id: int, groups, metrics: dict) -> None:
        self._call("slime_after_rollout", rollout_id=rollout_id, groups=groups, metrics=metrics)

    def before_train_step(self, rollout_id: int, step: int) -> None:
        self._call("slime_before_train_step", rollout_id=rollout_id, step=step)

    def after_train_step(self, rollout_id: int, step: int, metrics: dict) -> None:
        self._call("slime_after_train_step", rollout_id=rollout_id, step=step, metrics=metrics)

    def before_weight_update(self, rollout_id: int, version: int) -> None:
        self._call("slime_before_weight_update", rollout_id=rollout_id, version=version)

    def after_weight_update(self, rollout_id: int, version: int, metrics: dict) -> None:
        self._call("slime_after_weight_update", rollout_id=rollout_id, version=version, metrics=metrics)

    def before_eval(self, rollout_id: int) -> None:
        self._call("slime_before_eval", rollout_id=rollout_id)

    def after_eval(self, rollout_id: int, metrics: dict) -> None:
        self._call("slime_after_eval", rollout_id=rollout_id, metrics=metrics)

    def before_save(self, rollout_id: int, path: str) -> None:
        self._call("slime_before_save", rollout_id=rollout_id, path=path)

    def after_save(self, rollout_id: int, path: str) -> None:
        self._call("slime_after_save", rollout_id=rollout_id, path=path)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _distribution_of(module_name: str) -> str | None:
    """The installed distribution that provides a top-level module, if any."""
    top = module_name.split(".")[0]
    dists = metadata.packages_distributions().get(top, [])
    return dists[0] if dists else None
