"""slime-fsdp's plugin module, found through the ``slime`` entry-point group.

Registers the FSDP2 train backend (``--train-backend fsdp``) and its own options. It
imports nothing heavy (the rank class is named by a string), so ``slime --help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_core import hookimpl

if TYPE_CHECKING:
    from slime_core.config.config import Config

GROUP = "FSDP backend (slime-fsdp)"


@hookimpl
def slime_add_options(options):
    options.add(
        "--gradient-checkpointing",
        type=bool,
        default=False,
        help="recompute activations in the backward pass",
        group=GROUP,
    )
    options.add(
        "--attn-implementation",
        default=None,
        help="transformers attention (slime_packed, flash_attention_2, sdpa, eager); default: flash_attention_2 on a "
        "GPU with flash_attn installed, else slime_packed (varlen flash on CUDA, per-sample sdpa on CPU)",
        group=GROUP,
    )
    options.add(
        "--fsdp-torch-compile",
        type=bool,
        default=False,
        help="compile each decoder layer's forward with torch.compile (dynamic shapes): norms, rotary embedding, "
        "activations and casts run as fused kernels; the first micro-batches pay for the compilation",
        group=GROUP,
        acts_when=lambda config: config.train_backend == "fsdp",
        no_effect="it compiles the FSDP backend's layers (--train-backend fsdp)",
    )
    options.add(
        "--fsdp-cpu-offload",
        type=bool,
        default=False,
        help="keep parameters, gradients and optimizer state on CPU (FSDP2 CPUOffloadPolicy)",
        group=GROUP,
    )


@hookimpl
def slime_validate_config(config: Config):
    """A Megatron checkpoint as --ref-load needs slime-megatron's conversion (`slime_fsdp.megatron_weights`);
    some architectures need padded rows or an attention with masks (`slime_fsdp.architectures`)."""
    from slime_core.checkpoint.directory import is_megatron_checkpoint

    if config.get("train_backend") != "fsdp":
        return []
    from slime_fsdp.architectures import architecture_problems

    critic = critic_kl_problem(config)
    problems = architecture_problems(config) + ([critic] if critic else [])
    if config.get("true_on_policy_mode") and config.get("fsdp_torch_compile"):
        problems.append(
            "--true-on-policy-mode needs the trainer's layers to run as the engine runs them, and "
            "--fsdp-torch-compile fuses them into other kernels: drop one of the two"
        )
    if not is_megatron_checkpoint(config.get("ref_load")):
        return problems
    from slime_fsdp.megatron_weights import missing_converter

    problem = missing_converter(config)
    return problems + ([problem] if problem else [])


def critic_kl_problem(config: Config) -> str | None:
    """The critic's returns carry no KL penalty (`slime_fsdp.critic`), so a PPO run with a
    critic refuses ``--kl-coef``: said here and by the critic's ranks."""
    if config.advantage_estimator != "ppo" or not config.kl_coef:
        return None
    return "the critic's returns have no KL penalty: set --kl-coef 0 (use --use-kl-loss instead)"


@hookimpl
def slime_register_train_backends(register):
    register("fsdp", "slime_fsdp.rank:FSDPTrainRank")


@hookimpl
def slime_register_critics(register):
    register("fsdp", "slime_fsdp.critic:FSDPCriticRank")
