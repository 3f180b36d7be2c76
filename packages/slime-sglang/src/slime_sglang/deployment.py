"""``--sglang-config``: THUDM/slime's YAML deployment of the rollout servers, and the engines it means here.

The file (slime's format)::

    sglang:
      - name: actor
        model_path: /models/actor        # default: --hf-checkpoint
        num_gpus_per_engine: 1           # default: --rollout-num-gpus-per-engine
        update_weights: true             # default: whether model_path is --hf-checkpoint
        server_groups:                   # (``engine_groups`` is the same key)
          - worker_type: regular         # regular | prefill | decode | placeholder | encoder
            num_gpus: 2                  # the group's GPUs (CPU engine: slots, as --rollout-num-gpus counts them)
            num_gpus_per_engine: 1       # default: the model's
            overrides: {max_running_requests: 8}   # SGLang ServerArgs fields for this group's servers

The groups' ``num_gpus`` add up to ``--rollout-num-gpus``. A ``regular`` group starts
``num_gpus / num_gpus_per_engine`` engines, each with the run's ``--sglang-*`` options and the
group's ``overrides`` on top; a ``placeholder`` group reserves its slots and starts nothing.
``--prefill-num-servers N`` is slime's shorthand for a prefill group of N engines and a decode
group of the rest.

What is not started here, refused when the config is checked: ``prefill`` / ``decode`` groups
(prefill/decode disaggregation: the CPU engine has no KV-cache transfer, and slime does not yet
start SGLang's disaggregation mode and sglang-router's PD mode), ``encoder`` groups (encoder
disaggregation, likewise), and models besides the trained one (slime's frozen extra models,
``update_weights: false``, each behind its own router).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slime_core.config.config import Config

WORKER_TYPES = ("regular", "prefill", "decode", "placeholder", "encoder")
MODEL_KEYS = {"name", "model_path", "num_gpus_per_engine", "update_weights", "server_groups", "engine_groups"}
GROUP_KEYS = {"worker_type", "num_gpus", "num_gpus_per_engine", "overrides"}
#: Why each worker type that starts no engine here is refused.
NOT_STARTED = {
    "prefill": "prefill/decode disaggregation moves each request's KV cache from a prefill to a decode server: "
    "the CPU engine has no KV-cache transfer, and slime does not yet start SGLang's --disaggregation-mode "
    "servers behind sglang-router's PD mode; use regular groups",
    "encoder": "encoder disaggregation (separate vision-encoder servers) is not started by slime yet; "
    "use regular groups",
}
NOT_STARTED["decode"] = NOT_STARTED["prefill"]


@dataclass
class ServerGroup:
    """One ``server_groups`` entry, with the model's and the run's defaults filled in."""

    worker_type: str  # one of WORKER_TYPES
    num_gpus: int  # GPUs (CPU engine: slots) of the whole group
    num_gpus_per_engine: int  # GPUs (slots) of each engine
    overrides: dict[str, Any] = field(default_factory=dict)  # SGLang ServerArgs fields for its servers

    @property
    def engines(self) -> int:
        """How many engines the group starts (a placeholder: none)."""
        return 0 if self.worker_type == "placeholder" else self.num_gpus // self.num_gpus_per_engine


@dataclass
class ModelDeployment:
    """One ``sglang:`` entry: a model, the groups that serve it, whether it takes the trained weights."""

    name: str
    model_path: str
    update_weights: bool
    groups: list[ServerGroup]


def deployment(config: Config) -> list[ModelDeployment] | None:
    """The models ``--sglang-config`` (or ``--prefill-num-servers``) deploys, or None when neither
    is given (then ``--rollout-num-gpus`` makes engines of ``--rollout-num-gpus-per-engine``).
    Raises ValueError with every problem (`problems` lists them for the config check)."""
    models, errors = _read(config)
    if errors:
        raise ValueError("\n".join(errors))
    return models


def problems(config: Config) -> list[str]:
    """What is wrong with ``--sglang-config`` / ``--prefill-num-servers`` for this run (each
    message names the file and the key)."""
    return _read(config)[1]


@dataclass
class EnginePlan:
    """The engines the deployment starts for the trained model, in order, and the slots it reserves idle."""

    engines: list[ServerGroup]  # the group of each engine (index i: engine i)
    idle_slots: int  # placeholder GPUs (CPU slots): reserved, no engine

    @classmethod
    def of(cls, models: list[ModelDeployment]) -> EnginePlan:
        groups = [group for model in models for group in model.groups]
        engines = [group for group in groups for _ in range(group.engines)]
        return cls(engines, sum(group.num_gpus for group in groups if group.worker_type == "placeholder"))


def engine_configs(config: Config) -> list[Config] | None:
    """The config each engine of the deployment is started with (its group's engine size, and
    the group's ``overrides`` over the ``--sglang-*`` options), or None without a deployment."""
    models = deployment(config)
    if models is None:
        return None
    return [
        config.replace(
            rollout_num_gpus_per_engine=group.num_gpus_per_engine, sglang={**config.sglang, **group.overrides}
        )
        for group in EnginePlan.of(models).engines
    ]


def _broadcasts(config: Config) -> bool:
    """Whether new weights reach the engines by broadcast: asked for, or the default of
    disaggregated GPUs (``slime_core.loop.weight_sync.default_transport``)."""
    transport = config.get("update_weight_transport")
    default = config.get("rollout_engine") != "cpu" and not config.get("colocate")
    return transport == "broadcast" or (transport is None and config.get("update_weight_mode") != "delta" and default)


# -- reading and checking the file -----------------------------------------------------------


def _read(config: Config) -> tuple[list[ModelDeployment] | None, list[str]]:
    path = config.get("sglang_config")
    prefill = config.get("prefill_num_servers")
    errors = _exclusive(config)
    if path is None and prefill is None:
        return None, errors
    if config.get("rollout_backend") != "sglang":
        return None, [
            f"--sglang-config / --prefill-num-servers deploy SGLang servers; --rollout-backend is "
            f"{config.get('rollout_backend')}, which starts its own engines: drop them, or use sglang"
        ]
    if errors:
        return None, errors
    if path is None:
        models, errors = _from_prefill_num_servers(config, prefill), []
    else:
        models, errors = _from_file(config, path)
    if not errors:
        errors = _checked(config, models, f"--sglang-config {path}" if path else "--prefill-num-servers")
    return (None, errors) if errors else (models, [])


def _exclusive(config: Config) -> list[str]:
    given = [
        flag
        for flag, key in (
            ("--sglang-config", "sglang_config"),
            ("--prefill-num-servers", "prefill_num_servers"),
            ("--rollout-external-engine-addrs", "rollout_external_engine_addrs"),
        )
        if config.get(key)
    ]
    if len(given) < 2:
        return []
    return [f"{' and '.join(given)} each say which engines serve the run; give one of them (as in slime)"]


def _from_prefill_num_servers(config: Config, prefill: int) -> list[ModelDeployment]:
    """slime's ``--prefill-num-servers N``: N prefill engines, the rest of ``--rollout-num-gpus`` decode."""
    per_engine = config.rollout_num_gpus_per_engine
    total = config.get("rollout_num_gpus") or 0
    groups = [ServerGroup("prefill", prefill * per_engine, per_engine)]
    if total > prefill * per_engine:
        groups.append(ServerGroup("decode", total - prefill * per_engine, per_engine))
    return [ModelDeployment("default", config.hf_checkpoint, True, groups)]


def _from_file(config: Config, path: str) -> tuple[list[ModelDeployment], list[str]]:
    import yaml

    try:
        with open(path) as file:
            data = yaml.safe_load(file)
    except (OSError, yaml.YAMLError) as exc:
        return [], [f"--sglang-config {path}: cannot read it ({exc})"]
    if not isinstance(data, dict) or not isinstance(data.get("sglang"), list) or not data["sglang"]:
        return [], [f"--sglang-config {path}: needs a top-level 'sglang:' list of models (slime's format)"]
    models, errors = [], []
    for index, entry in enumerate(data["sglang"]):
        model, model_errors = _model(config, entry, f"--sglang-config {path}: sglang[{index}]")
        models += [model] if model else []
        errors += model_errors
    return models, errors


def _model(config: Config, entry: Any, where: str) -> tuple[ModelDeployment | None, list[str]]:
    if not isinstance(entry, dict):
        return None, [f"{where}: a model is a mapping with name and server_groups"]
    errors = [
        f"{where}: unknown key '{key}' (known: {', '.join(sorted(MODEL_KEYS))})" for key in entry.keys() - MODEL_KEYS
    ]
    if not entry.get("name"):
        errors.append(f"{where}: 'name' is missing")
    where = f"{where} ({entry.get('name')})"
    raw_groups = entry.get("server_groups") or entry.get("engine_groups")
    if not isinstance(raw_groups, list) or not raw_groups:
        return None, [*errors, f"{where}: 'server_groups' must be a non-empty list"]
    per_engine = entry.get("num_gpus_per_engine") or config.rollout_num_gpus_per_engine
    groups = []
    for index, raw in enumerate(raw_groups):
        group, group_errors = _group(raw, per_engine, f"{where}.server_groups[{index}]")
        groups += [group] if group else []
        errors += group_errors
    paths = {group.overrides.pop("model_path", entry.get("model_path") or config.hf_checkpoint) for group in groups}
    if len(paths) > 1:
        errors.append(f"{where}: its groups name different model_path values {sorted(paths)}; one model, one path")
    model_path = min(paths, default=config.hf_checkpoint)
    update = entry.get("update_weights")
    return ModelDeployment(
        str(entry.get("name")), model_path, model_path == config.hf_checkpoint if update is None else update, groups
    ), errors


def _group(raw: Any, per_engine: int, where: str) -> tuple[ServerGroup | None, list[str]]:
    if not isinstance(raw, dict):
        return None, [f"{where}: a server group is a mapping with worker_type and num_gpus"]
    errors = [
        f"{where}: unknown key '{key}' (known: {', '.join(sorted(GROUP_KEYS))})" for key in raw.keys() - GROUP_KEYS
    ]
    worker_type, num_gpus = raw.get("worker_type"), raw.get("num_gpus")
    per_engine = raw.get("num_gpus_per_engine") or per_engine
    overrides = raw.get("overrides") or {}
    if worker_type not in WORKER_TYPES:
        errors.append(f"{where}: worker_type {worker_type!r} is none of {', '.join(WORKER_TYPES)}")
    if not isinstance(num_gpus, int) or num_gpus < 1:
        errors.append(f"{where}: num_gpus must be a positive integer, got {num_gpus!r}")
    elif worker_type != "placeholder" and (not isinstance(per_engine, int) or per_engine < 1 or num_gpus % per_engine):
        errors.append(f"{where}: num_gpus {num_gpus} does not split into engines of num_gpus_per_engine {per_engine}")
    if not isinstance(overrides, dict):
        errors.append(f"{where}: overrides must be a mapping of SGLang ServerArgs fields to values")
    if errors:
        return None, errors
    return ServerGroup(worker_type, num_gpus, per_engine, dict(overrides)), []


def _checked(config: Config, models: list[ModelDeployment], source: str) -> list[str]:
    """What this slime cannot start of a well-formed deployment, and a GPU total that differs."""
    from slime_sglang.servers import CPU_ENGINE_SGLANG_OPTIONS

    total, wanted = sum(g.num_gpus for m in models for g in m.groups), config.get("rollout_num_gpus")
    errors = []
    if total != wanted:  # GPUs, or CPU slots for the CPU engine, as --rollout-num-gpus counts them
        errors.append(f"{source}: its groups hold {total} GPUs and --rollout-num-gpus is {wanted}; make them equal")
    if not any(group.engines for model in models for group in model.groups):
        errors.append(f"{source}: starts no engine (placeholder groups only); give a regular group")
    if len(models) > 1 or not models[0].update_weights:
        errors.append(
            f"{source}: deploys {[m.name for m in models]}; this slime serves only the trained model "
            "(update_weights true, model_path --hf-checkpoint) from it: frozen extra models are not started yet"
        )
    for model in models:
        refused: dict[str, list[str]] = {}  # reason: the worker types it refuses
        for kind in dict.fromkeys(g.worker_type for g in model.groups if g.worker_type in NOT_STARTED):
            refused.setdefault(NOT_STARTED[kind], []).append(kind)
        errors += [f"{source}: model {model.name}: worker_type {', '.join(k)}: {why}" for why, k in refused.items()]
        for group in model.groups:
            if config.get("rollout_engine") == "cpu" and group.overrides.keys() - set(CPU_ENGINE_SGLANG_OPTIONS):
                unused = sorted(group.overrides.keys() - set(CPU_ENGINE_SGLANG_OPTIONS))
                errors.append(
                    f"{source}: model {model.name}: overrides {unused} would change nothing: the CPU engine takes "
                    f"only {', '.join(CPU_ENGINE_SGLANG_OPTIONS)}; drop them or use --rollout-engine sglang"
                )
    sizes = {g.num_gpus_per_engine for m in models for g in m.groups if g.engines}
    if len(sizes) > 1 and _broadcasts(config):
        errors.append(
            f"{source}: engines of different sizes {sorted(sizes)}: a weight broadcast here gives every engine the "
            "same number of ranks; use one num_gpus_per_engine, or --update-weight-transport disk"
        )
    return errors
