"""The ``sglang`` rollout backend (``slime_core.rollout_backend.RolloutBackend``).

It drives servers that speak SGLang's native HTTP API: real SGLang servers on GPUs
(``--rollout-engine sglang``), the CPU engine (``--rollout-engine cpu``), any server a plugin
registers with ``slime_register_rollout_engines``, or engines already running
(``--rollout-external-engine-addrs``). Each started engine is an `EngineServer` Ray actor in
its bundle of the run's placement; control calls and weight updates go through
`slime_sglang.engine_group.EngineGroup`, generation through `slime_sglang.client.EngineClient`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_sglang.client import EngineClient
from slime_sglang.deployment import EnginePlan, deployment
from slime_sglang.engine_group import EngineGroup, engine_count

if TYPE_CHECKING:
    from slime_core.config.config import Config

#: What a real SGLang server takes. Its /update_weights_from_tensor wants tensors serialised by
#: SGLang's MultiprocessingSerializer (shared memory or CUDA IPC handles from a process beside
#: it), not the safetensors bytes the CPU engine takes, so the tensor transport is not offered.
REAL_SGLANG_TRANSPORTS = ("broadcast", "disk")


class SGLangBackend:
    """Engines with SGLang's HTTP API, started as Ray actors or given as addresses."""

    def engine_bundles(self, config: Config, gpu: bool) -> list[dict[str, float]]:
        """One bundle per engine started: ``--rollout-num-gpus-per-engine`` GPUs with CUDA (the
        CPU engine: a CPU slot); none for external engines. With ``--sglang-config``: each
        engine's group's size, then one bundle per slot of its placeholder groups (reserved idle)."""
        if config.get("rollout_external_engine_addrs"):
            return []
        models = deployment(config)
        if models is None:
            return [_bundle(config, gpu, config.rollout_num_gpus_per_engine)] * engine_count(config)
        plan = EnginePlan.of(models)
        return [_bundle(config, gpu, group.num_gpus_per_engine) for group in plan.engines] + [
            _bundle(config, gpu, 1)
        ] * plan.idle_slots

    def start(self, config: Config, actor_options=None, plugins=None) -> EngineGroup:
        if config.get("rollout_external_engine_addrs"):
            return EngineGroup.connect(config.rollout_external_engine_addrs, config.rollout_num_gpus_per_engine)
        if config.get("actor_runtime") == "inprocess":
            raise ValueError(
                "--actor-runtime inprocess: the sglang rollout backend starts its engines as Ray actors; "
                "give running engines with --rollout-external-engine-addrs, or use --actor-runtime ray"
            )
        engines = EngineGroup.start(config, config.hf_checkpoint, plugins, actor_options)
        if config.rollout_engine == "sglang":
            engines.transports = REAL_SGLANG_TRANSPORTS
        # the CPU engine merges pushed LoRA adapters (`slime_sglang.cpu_engine.adapters`); SGLang's
        # adapters are per request (/load_lora_adapter + lora_path), which the rollout does not send
        engines.loads_lora_adapters = config.rollout_engine == "cpu"
        return engines

    def client(self, url: str, api_key: str | None = None) -> EngineClient:
        return EngineClient(url, api_key=api_key)


def _bundle(config: Config, gpu: bool, gpus_per_engine: int) -> dict[str, float]:
    """One engine's bundle: its GPUs with CUDA, a CPU slot for the CPU engine."""
    gpus = gpus_per_engine if gpu and config.rollout_engine != "cpu" else 0
    return {"GPU": gpus, "CPU": 1} if gpus else {"CPU": 1}


#: The instance registered as rollout backend ``sglang``.
sglang_backend = SGLangBackend()
