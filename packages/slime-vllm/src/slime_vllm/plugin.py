"""slime-vllm's plugin module, found through the ``slime`` entry-point group.

It registers the ``vllm`` rollout backend and its options, and checks a run's config for
what the backend cannot do. It imports nothing heavy, so ``slime --help`` stays fast.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from slime_core import hookimpl

if TYPE_CHECKING:
    from slime_core.config.config import Config

GROUP = "vLLM engines (slime-vllm)"


@hookimpl
def slime_add_options(options):
    options.add(
        "--vllm-python",
        default=None,
        group=GROUP,
        help="the Python interpreter that has vLLM and runs its servers (default: this one when vLLM imports "
        "here, else .venv-vllm/bin/python as scripts/setup-dev.sh makes it); other --vllm-* flags are "
        "passed to vLLM's server (e.g. --vllm-dtype float32 --vllm-enforce-eager)",
    )


@hookimpl
def slime_validate_config(config: Config, plugins):
    if config.get("rollout_backend") != "vllm":
        return []
    from slime_core.cluster.engine_servers import engine_count
    from slime_vllm.servers import find_vllm_python, missing_vllm_message

    errors = []
    python = config.get("vllm_python")
    if python is None and find_vllm_python() is None:
        errors.append(missing_vllm_message())
    elif python is not None and not os.access(python, os.X_OK):
        errors.append(f"--vllm-python {python}: no such interpreter; give the python of the environment that has vLLM")
    if config.get("actor_runtime") == "inprocess":
        errors.append(
            "--actor-runtime inprocess runs without Ray, and the vllm rollout backend starts its engines "
            "as Ray actors; use --actor-runtime ray"
        )
    if config.get("true_on_policy_mode"):
        errors.append(
            "--true-on-policy-mode needs engines whose log-probs are batch-invariant and computed as the trainer "
            "computes them (the CPU engine, or SGLang's deterministic inference); vLLM's are not: use the sglang "
            "rollout backend, or drop the mode"
        )
    if config.get("update_weight_mode") == "delta":
        errors.append(
            "--update-weight-mode delta needs engines that apply deltas to a local checkpoint (/pull_weights), "
            "which vLLM has not; use --update-weight-mode full, or the sglang rollout backend"
        )
    if config.get("rollout_top_p", 1.0) < 1.0:
        errors.append("--rollout-top-p < 1 needs each token's nucleus back (top-p replay), which vLLM does not return")
    if config.get("use_rollout_routing_replay"):
        errors.append(
            "--use-rollout-routing-replay needs each token's routed experts back, which slime's vLLM servers do "
            "not return; use the sglang rollout backend, or --use-routing-replay (the trainer's own routing)"
        )
    try:
        engine_count(config)
    except ValueError as exc:
        errors.append(str(exc))
    return errors


@hookimpl
def slime_register_rollout_backends(register):
    register("vllm", "slime_vllm.backend:vllm_backend")
