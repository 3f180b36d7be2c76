"""slime-sglang's plugin module, found through the ``slime`` entry-point group.

This is where the package registers the ``sglang`` rollout backend and the engine servers it
starts (SGLang servers and the CPU engine), ``slime engine serve`` (the CPU engine's server)
and its options. The default rollout, generate and eval functions it runs are slime-core's.
It imports nothing heavy, so ``slime --help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_core import hookimpl

if TYPE_CHECKING:
    from slime_core.config.config import Config

GROUP = "rollout engines (slime-sglang)"


@hookimpl
def slime_add_options(options):
    options.add(
        "--rollout-engine",
        default="sglang",
        group=GROUP,
        help="the engine server the sglang rollout backend starts: sglang (SGLang on GPUs), cpu (the CPU engine), "
        "or a plugin's server with SGLang's API",
    )
    options.add(
        "--rollout-external-engine-addrs",
        nargs="+",
        default=None,
        group=GROUP,
        help="HOST:PORT of engines already running (SGLang servers or `slime engine serve`): use them "
        "instead of starting engines; slime checks that they answer and never shuts them down",
    )
    options.add(
        "--sglang-config",
        type=str,
        default=None,
        group=GROUP,
        help="slime's YAML deployment of the rollout servers: a 'sglang:' list of models, each with server_groups "
        "(worker_type regular or placeholder, num_gpus adding up to --rollout-num-gpus, num_gpus_per_engine, "
        "overrides: SGLang ServerArgs fields for that group's servers); see docs/coming-from-slime.md",
    )
    options.add(
        "--prefill-num-servers",
        type=int,
        default=None,
        group=GROUP,
        help="slime's prefill/decode disaggregation: this many prefill engines, the rest decode; refused here "
        "(the CPU engine has no KV-cache transfer, and slime does not start SGLang's PD mode yet)",
    )


@hookimpl
def slime_validate_config(config: Config, plugins):
    from slime_core.components import run_generates
    from slime_core.routing_replay import engine_problem
    from slime_sglang.deployment import problems
    from slime_sglang.engine_group import engine_count, engine_url

    errors = []
    if config.get("use_fault_tolerance") and config.get("rollout_external_engine_addrs"):
        errors.append(
            "--use-fault-tolerance restarts the engines slime started; engines given by "
            "--rollout-external-engine-addrs are not slime's to restart (drop one of the two options)"
        )
    errors += problems(config)  # --sglang-config / --prefill-num-servers (slime_sglang.deployment)
    if config.get("rollout_backend") != "sglang":
        return errors
    if (
        config.get("actor_runtime") == "inprocess"
        and not config.get("rollout_external_engine_addrs")
        and run_generates(config, plugins)
    ):
        errors.append(
            "--actor-runtime inprocess runs without Ray, and the sglang rollout backend starts its engines as "
            "Ray actors; use --actor-runtime ray, or give running engines with --rollout-external-engine-addrs"
        )
    routing = engine_problem(config, plugins.registry("rollout_engines"))
    if routing:
        errors.append(routing)
    if config.get("rollout_engine") == "sglang" and config.get("update_weight_transport") == "tensor":
        errors.append(
            "--update-weight-transport tensor: a real SGLang server (--rollout-engine sglang) takes tensors "
            "only as serialised CUDA IPC / shared-memory handles, which slime does not send; use broadcast "
            "(disaggregated GPUs) or disk"
        )
    errors += _true_on_policy_problems(config)
    errors += _video_problems(config)
    for address in config.get("rollout_external_engine_addrs") or []:
        try:
            engine_url(address)
        except ValueError as exc:
            errors.append(f"--rollout-external-engine-addrs: {exc}")
    deployed = config.get("sglang_config") or config.get("prefill_num_servers")
    if not config.get("rollout_external_engine_addrs") and not deployed:
        try:
            engine_count(config)
        except ValueError as exc:
            errors.append(str(exc))
    return errors


def _video_problems(config: Config) -> list[str]:
    """Videos (``--multimodal-keys`` with ``video``) on real SGLang: slime sends each video as its
    frames, and SGLang's ``video_data`` takes a video file, which it decodes itself."""
    from slime_core.data.prompt_dataset import multimodal_keys

    if "video" not in (multimodal_keys(config) or {}) or config.get("rollout_engine") != "sglang":
        return []
    return [
        "--multimodal-keys names videos, which slime sends to the engines as lists of frames (video_data); a real "
        "SGLang server (--rollout-engine sglang) takes a video file there and decodes it itself, so it would not "
        "take them; use --rollout-engine cpu, or drop video from --multimodal-keys"
    ]


def _true_on_policy_problems(config: Config) -> list[str]:
    """``--true-on-policy-mode`` with the CPU engine: the trainer must compute as it does (float32, sdpa)."""
    if not config.get("true_on_policy_mode") or config.get("rollout_engine") != "cpu":
        return []
    errors = []
    if config.get("bf16"):
        errors.append(
            "--true-on-policy-mode: the CPU engine computes in float32, and --bf16 trains in bfloat16; drop --bf16"
        )
    if config.get("attn_implementation") not in (None, "sdpa"):
        errors.append(
            f"--true-on-policy-mode: the CPU engine's attention is sdpa, and --attn-implementation "
            f"{config.attn_implementation} is another kernel; leave it out (sdpa is then used)"
        )
    return errors


@hookimpl
def slime_add_commands(subparsers):
    from slime_sglang.cpu_engine.serve_command import add_engine_command

    add_engine_command(subparsers)


@hookimpl
def slime_register_rollout_backends(register):
    register("sglang", "slime_sglang.backend:sglang_backend")


@hookimpl
def slime_register_rollout_engines(register):
    register("sglang", "slime_sglang.servers:sglang_command")
    register("cpu", "slime_sglang.servers:cpu_engine_command")
