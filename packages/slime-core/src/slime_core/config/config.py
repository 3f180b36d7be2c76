"""`Config`: the resolved options of a run, read by every phase and plugin."""

from __future__ import annotations

import difflib
from typing import Any

import yaml

from slime_core.cluster.network import Network


class ConfigError(ValueError):
    """Every problem found in a config, reported together."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__(f"{len(errors)} problem(s) in the config:\n" + "\n".join(f"  - {e}" for e in errors))


class FrozenConfigError(AttributeError):
    """An assignment to a config that is frozen (resolved and checked)."""


class Config:
    """Option values by key (``config.rollout_batch_size``), plus pass-through dicts.

    ``sglang``, ``router_args`` and ``vllm`` hold the ``--sglang-*`` / ``--router-*`` / ``--vllm-*``
    options slime does not declare itself, keyed without their prefix, for the SGLang servers, the
    router and the vLLM servers
    (``router`` itself is the ``--router`` option: which router runs).
    ``sources`` says where each value came from: ``default``, ``FILE:LINE`` or ``command line``.
    ``network`` (`slime_core.cluster.network.Network`) is no option: the driver makes the run's
    config with it (`replace`) once the run's placement is reserved (loopback until then), and it
    reaches every process with the config.

    `load_config` freezes the config once it is resolved and checked (`freeze`): from then on
    every process reads the values that were checked, and an assignment raises
    `FrozenConfigError` naming the key. A value that follows from others is resolved before
    that, in a ``slime_resolve_config`` hook; a changed copy is made with `replace`.
    """

    def __init__(
        self,
        values: dict[str, Any],
        sources: dict[str, str] | None = None,
        sglang: dict[str, Any] | None = None,
        router: dict[str, Any] | None = None,
        vllm: dict[str, Any] | None = None,
    ):
        self.__dict__["_values"] = dict(values)
        self.__dict__["sources"] = dict(sources or {})
        self.__dict__["sglang"] = dict(sglang or {})
        self.__dict__["router_args"] = dict(router or {})
        self.__dict__["vllm"] = dict(vllm or {})
        self.__dict__["network"] = Network()
        self.__dict__["frozen"] = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        values = self.__dict__["_values"]
        if name in values:
            return values[name]
        close = difflib.get_close_matches(name, list(values), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise AttributeError(f"config has no option '{name}'{hint}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name != "network" and name not in self._values:
            raise AttributeError(f"config has no option '{name}'; declare it with the slime_add_options hook")
        if self.frozen:
            raise FrozenConfigError(
                f"config.{name} cannot be set: the config is frozen once resolved and checked, so every process "
                f"reads the values that were checked; compute it in a slime_resolve_config hook, or make a "
                f"changed copy with config.replace({name}=...)"
            )
        if name == "network":
            self.__dict__[name] = value
        else:
            self._values[name] = value

    def freeze(self) -> Config:
        """Refuse every assignment from now on (this config and its pickled or replaced copies)."""
        self.__dict__["frozen"] = True
        return self

    def replace(self, **changes: Any) -> Config:
        """A copy with ``changes`` (option values by key, ``network``, or ``sglang``: the
        pass-through SGLang options), frozen if this one is; this config is left as it is.
        Sources stay those of the loaded values."""
        network = changes.pop("network", self.network)
        sglang = changes.pop("sglang", self.sglang)
        unknown = [key for key in changes if key not in self._values]
        if unknown:
            raise AttributeError(f"config has no option '{unknown[0]}'; declare it with the slime_add_options hook")
        copy = Config({**self._values, **changes}, self.sources, sglang, self.router_args, self.vllm)
        copy.__dict__["network"] = network
        return copy.freeze() if self.frozen else copy

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"frozen": False, **state})

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name, default)

    def to_dict(self) -> dict[str, Any]:
        """Every value, with the pass-through options under ``sglang``, ``router_args`` and ``vllm``."""
        return {
            **self._values,
            "sglang": dict(self.sglang),
            "router_args": dict(self.router_args),
            "vllm": dict(self.vllm),
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)
