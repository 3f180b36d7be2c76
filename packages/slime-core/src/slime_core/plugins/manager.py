"""Loading plugins and calling their hooks through one small typed facade.

Plugins come from three places, in this order:

1. the core's built-in plugin (``slime_core.builtins``), always;
2. modules listed in the ``slime`` entry-point group of installed distributions, unless
   ``SLIME_DISABLE_PLUGIN_AUTOLOAD`` is set;
3. modules named with ``-p module`` (or ``SLIME_PLUGINS=mod1,mod2``, which is how Ray
   workers see the driver's ``-p`` plugins).

``SLIME_BLOCK_PLUGINS=name1,name2`` blocks plugins by name; ``SLIME_TRACE_HOOKS=1``
prints every hook call and the plugins it runs to stderr.

Hooks are called through pluggy, so plugins may use what pluggy offers: wrappers
(``@hookimpl(wrapper=True)`` and old-style ``hookwrapper=True``), ``tryfirst``/``trylast``,
``firstresult`` specs. Registration hooks and ``slime_add_options`` are called once per
plugin (``Plugins._per_plugin`` says why), so a wrapper there wraps its own plugin only.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import CodeType, FrameType, ModuleType
from typing import TYPE_CHECKING, Any

import pluggy

from slime_core import hookspecs
from slime_core.plugins.registry import KINDS, Registry, RegistryError

if TYPE_CHECKING:
    from slime_core.config import Config

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
        self._registries: dict[str, Registry] = {}
        if os.environ.get(ENV_TRACE):
            self._pm.add_hookcall_monitoring(_print_hook_call, lambda *_: None)
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
                f"-p {module_name}: cannot import it ({exc}); check the module name and that its folder is on "
                "PYTHONPATH"
            ) from exc
        except Exception as exc:
            raise PluginError(f"-p {module_name}: importing it failed ({type(exc).__name__}: {exc})") from exc
        dist = _distribution_of(module_name)
        self._add(module_name, module, dist, _version(dist) if dist else None)

    @classmethod
    def in_worker(cls, config: Config) -> Plugins:
        """The run's plugins as a worker process (a train rank, the router front) loads them:
        installed ones, the driver's ``-p`` modules (``SLIME_PLUGINS``, set by `worker_env`),
        and the config's ``--custom-*-path`` functions."""
        from slime_core.plugins.custom_paths import apply_custom_paths

        plugins = cls()
        apply_custom_paths(config, plugins)
        return plugins

    def worker_env(self) -> dict[str, str]:
        """Environment variables with which a process this run starts (a Ray actor, a server)
        loads the same local ``-p`` plugins: ``SLIME_PLUGINS`` names them, ``PYTHONPATH``
        holds the folders they were imported from."""
        local = {
            name: info.module
            for name, info in self.info.items()
            if info.distribution is None and isinstance(info.module, ModuleType) and info.module.__name__ == name
        }
        names = list(dict.fromkeys(_env_list(ENV_PLUGINS) + list(local)))
        folders = [str(_import_root(module)) for module in local.values() if getattr(module, "__file__", None)]
        paths = list(dict.fromkeys(folders + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        env = {ENV_PLUGINS: ",".join(names)} if names else {}
        return {**env, "PYTHONPATH": os.pathsep.join(paths)} if paths else env

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

    def _call(self, hook_name: str, **kwargs: Any) -> Any:
        """Call a hook through pluggy and return pluggy's result.

        Going through pluggy is what makes plugins' ``wrapper=True``/``hookwrapper=True``
        implementations wrap the others, ``tryfirst``/``trylast`` order them and
        ``firstresult`` specs stop at the first non-None result: the result is a list of
        the non-None results, or that first result for a ``firstresult`` spec.
        """
        return self._run(getattr(self._pm.hook, hook_name), **kwargs)

    def _run(self, caller: pluggy.HookCaller, **kwargs: Any) -> Any:
        """Call a hook caller; an exception from a plugin's code becomes a PluginError naming it."""
        try:
            return caller(**kwargs)
        except (PluginError, RegistryError):
            raise
        except Exception as exc:
            name = _raised_by(caller, exc)
            if name is None:  # raised by pluggy itself, whose message says what is wrong
                raise
            info = self.info[name]
            raise PluginError(
                f"plugin '{info.name}' ({info.label}) failed in {caller.name}: {type(exc).__name__}: {exc}"
            ) from exc

    def _per_plugin(self, hook_name: str) -> Iterator[tuple[str, Callable[..., Any]]]:
        """``(plugin name, call)`` for each plugin implementing a hook, in pluggy's order.

        ``call(**kwargs)`` calls the hook through pluggy with only that plugin's
        implementations. This is for hooks whose arguments must know which plugin they
        are handed to (``register`` records the plugin with each entry it adds, and
        ``options.current_plugin`` with each option), which one call to all plugins
        cannot tell: plugins still come in pluggy's order (tryfirst/trylast included)
        and a plugin's wrappers run around its own implementation, but not around
        other plugins'.
        """
        for name in _plugin_order(getattr(self._pm.hook, hook_name)):
            others = self._pm.get_plugins() - {self._pm.get_plugin(name)}
            caller = self._pm.subset_hook_caller(hook_name, remove_plugins=others)
            yield name, functools.partial(self._run, caller)

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
            for plugin, call in self._per_plugin(f"slime_register_{kind}"):
                info = self.info[plugin]

                def register(name, target, *, label=None, _info=info):
                    registry.register(name, target, _info.name, _info.label, label=label)

                call(register=register)
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
        """Let every plugin declare its options, each tagged with the plugin that declared it."""
        try:
            for plugin, call in self._per_plugin("slime_add_options"):
                options.current_plugin = plugin
                call(options=options)
        finally:
            options.current_plugin = None

    def resolve_config(self, config: Config) -> None:
        self._call("slime_resolve_config", config=config)

    def validate_config(self, config: Config) -> list[str]:
        errors: list[str] = []
        for result in self._call("slime_validate_config", config=config, plugins=self):
            errors.extend(result)
        return errors

    def ranks_per_replica(self, config: Config) -> int:
        """How many training ranks train on the same samples (``slime_ranks_per_replica``; 1 unless a
        plugin says otherwise)."""
        return self._call("slime_ranks_per_replica", config=config) or 1

    def add_commands(self, subparsers) -> None:
        self._call("slime_add_commands", subparsers=subparsers)

    # ---- lifecycle -----------------------------------------------------------------

    def before_run(self, config: Config) -> None:
        self._call("slime_before_run", config=config)

    def after_run(self, config: Config, status: str) -> None:
        self._call("slime_after_run", config=config, status=status)

    def before_rollout(self, rollout_id: int, config: Config) -> None:
        self._call("slime_before_rollout", rollout_id=rollout_id, config=config)

    def after_rollout(self, rollout_id: int, groups, metrics: dict) -> None:
        self._call("slime_after_rollout", rollout_id=rollout_id, groups=groups, metrics=metrics)

    def log_rollout(self, rollout_id: int, config: Config, groups, metrics: dict, seconds: float) -> bool:
        """Whether a plugin leaves out the rollout's default metrics (``slime_log_rollout``)."""
        return any(
            self._call(
                "slime_log_rollout",
                rollout_id=rollout_id,
                config=config,
                groups=groups,
                metrics=metrics,
                seconds=seconds,
            )
        )

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

    def log_eval(self, rollout_id: int, config: Config, groups: dict, metrics: dict) -> bool:
        """Whether a plugin leaves out the evaluation's default metrics (``slime_log_eval``)."""
        return any(self._call("slime_log_eval", rollout_id=rollout_id, config=config, groups=groups, metrics=metrics))

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


def _plugin_order(caller: pluggy.HookCaller) -> list[str]:
    """The plugins implementing a hook, in the order pluggy calls their plain
    implementations; plugins with only wrappers come last."""
    in_call_order = reversed(caller.get_hookimpls())
    plain_first = sorted(in_call_order, key=lambda impl: impl.wrapper or impl.hookwrapper)
    return list(dict.fromkeys(impl.plugin_name for impl in plain_first))


def _raised_by(caller: pluggy.HookCaller, exc: BaseException) -> str | None:
    """The plugin whose implementation of the hook raised ``exc``, or None if none did.

    It is the implementation running in the innermost traceback frame that runs one:
    an error raised in a helper belongs to the implementation that called it, one that
    a wrapper lets through stays the inner implementation's, and one a wrapper raises
    itself is the wrapper's. Two plugins sharing one module function (one re-exporting
    the other's hook) cannot be told apart; the error then names one of them.
    """
    frames = [frame for frame, _ in traceback.walk_tb(exc.__traceback__)]
    impls = caller.get_hookimpls()
    return next((impl.plugin_name for frame in reversed(frames) for impl in impls if _runs_in(impl, frame)), None)


def _runs_in(impl: pluggy.HookImpl, frame: FrameType) -> bool:
    """Whether ``frame`` runs a hook implementation's function, or one it decorates.

    Code objects are compared by identity: two modules with the same source have equal
    ones. Methods of two plugin objects of one class share their code, so a method's
    frame must also have the implementation's object as its first argument.
    """
    function = impl.function
    if inspect.ismethod(function) and frame.f_code is function.__func__.__code__:
        return frame.f_locals.get(frame.f_code.co_varnames[0]) is function.__self__
    return any(code is frame.f_code for code in _codes(getattr(function, "__func__", function)))


def _codes(function: Any) -> Iterator[CodeType | None]:
    """The code of a function and of the functions it decorates (``__wrapped__``)."""
    while function is not None:
        yield getattr(function, "__code__", None)
        function = getattr(function, "__wrapped__", None)


def _print_hook_call(hook_name: str, impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, Any]) -> None:
    """``SLIME_TRACE_HOOKS``: one line to stderr per implementation a hook call runs, in
    the order pluggy starts them (wrappers first)."""
    for impl in reversed(impls):
        kind = " (wrapper)" if impl.wrapper or impl.hookwrapper else ""
        print(f"slime hook: {hook_name} -> plugin '{impl.plugin_name}'{kind}", file=sys.stderr)


def _import_root(module: ModuleType) -> Path:
    """The ``sys.path`` folder ``module`` was imported from (``a.b`` in ``ROOT/a/b.py``: ROOT)."""
    path = Path(module.__file__ or module.__name__).resolve()  # a -p module is a file
    depth = module.__name__.count(".") + (1 if path.name == "__init__.py" else 0)
    return path.parents[depth]


def _distribution_of(module_name: str) -> str | None:
    """The installed distribution that provides a top-level module, if any."""
    top = module_name.split(".")[0]
    dists = metadata.packages_distributions().get(top, [])
    return dists[0] if dists else None
