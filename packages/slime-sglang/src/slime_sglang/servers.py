"""The engine servers the sglang rollout backend starts: real SGLang on GPUs, the CPU engine elsewhere.

Each is a registered rollout engine (``slime_register_rollout_engines``) whose command
``command(config, model_path, port) -> argv`` an `slime_core.cluster.engine_servers.EngineServer`
Ray actor runs (``sglang``: ``python -m sglang.launch_server`` on the actor's GPUs with every
``--sglang-*`` option passed through, by `slime_sglang.sglang_server`; ``cpu``: ``slime engine
serve``; a plugin's: its own command, called with ``host=`` the node's IP as well when the run
spans nodes). The actor, its log, its port retries and how it dies with its run are slime-core's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from slime_core.cluster.command_flags import as_flags
from slime_core.cluster.network import LOOPBACK
from slime_core.data.prompt_budget import shortens_responses
from slime_core.routing_replay import returns_routed_experts

if TYPE_CHECKING:
    from slime_core.config.config import Config


@returns_routed_experts
def sglang_command(config: Config, model_path: str, port: int, host: str = LOOPBACK) -> list[str]:
    """``sglang.launch_server`` for one engine, through `slime_sglang.sglang_server` (which
    gives it the run's keys from the environment); ``config.sglang`` holds the pass-through options."""
    own = {"model_path": model_path, "host": host, "port": port, "tp_size": config.rollout_num_gpus_per_engine}
    if config.true_on_policy_mode:  # SGLang's batch-invariant kernels, numerics aligned to an FSDP trainer's
        own.update(enable_deterministic_inference=True, rl_on_policy_target="fsdp")
    if config.get("use_rollout_routing_replay"):  # R3: the server captures the routing only when started so
        own["enable_return_routed_experts"] = True
    return [sys.executable, "-m", "slime_sglang.sglang_server", *as_flags(own), *as_flags(config.sglang)]


#: The ``--sglang-*`` options that the CPU engine takes as well (same meaning as SGLang's);
#: it has no use for the others (memory fractions, CUDA graphs, ...), which are for SGLang.
CPU_ENGINE_SGLANG_OPTIONS = ("max_running_requests", "context_length")


def seeds_each_copy(command_fn: Callable) -> Callable:
    """Mark a rollout engine's command (``slime_register_rollout_engines``) whose server draws
    copy i of a request for n samples with ``slime_core.engine.parallel_sample_seed(seed, i)``:
    its engines then declare ``per_copy_seeds`` (`slime_sglang.engine_group.EngineGroup`), and the
    default rollout sends a group request its seed. SGLang gives every copy the same seed."""
    command_fn.seeds_each_copy = True
    return command_fn


@seeds_each_copy
@shortens_responses
@returns_routed_experts
def cpu_engine_command(config: Config, model_path: str, port: int, host: str = LOOPBACK) -> list[str]:
    """``slime engine serve`` for one CPU engine, with the ``--sglang-*`` options it shares
    with SGLang (`CPU_ENGINE_SGLANG_OPTIONS`); it takes the run's keys from its environment. It
    shortens a response to fit its context (`shortens_responses`), where SGLang refuses it."""
    slime = str(Path(sys.executable).with_name("slime"))
    own = {"model": model_path, "host": host, "port": port}
    shared = {key: config.sglang.get(key) for key in CPU_ENGINE_SGLANG_OPTIONS}
    shared["enable_deterministic_inference"] = config.true_on_policy_mode or None  # batch-invariant log-probs
    return [slime, "engine", "serve", *as_flags(own), *as_flags(shared)]
