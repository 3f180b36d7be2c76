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
    add_lora_options(options)


def add_lora_options(options) -> None:
    """``--lora-*`` (`slime_fsdp.lora`), with the names of slime's LoRA pull request (THUDM/slime#1865)."""
    lora_on = lambda config: config.get("lora_rank")  # noqa: E731
    options.add(
        "--lora-rank",
        type=int,
        default=0,
        help="train rank-r LoRA adapters (peft) on --lora-target-modules, the base model frozen; 0: train all weights",
        group=GROUP,
    )
    options.add(
        "--lora-alpha",
        type=int,
        default=16,
        help="LoRA scaling: the adapter's update is (alpha / rank) B A",
        group=GROUP,
        acts_when=lora_on,
        no_effect="it scales the LoRA adapter (--lora-rank > 0)",
    )
    options.add(
        "--lora-dropout",
        type=float,
        default=0.0,
        help="dropout on the LoRA adapter's input while training",
        group=GROUP,
        acts_when=lora_on,
        no_effect="it applies to the LoRA adapter (--lora-rank > 0)",
    )
    options.add(
        "--lora-target-modules",
        nargs="+",
        default=["all-linear"],
        help="the modules that get an adapter: Hugging Face names (q_proj v_proj ...), Megatron's (linear_qkv "
        "linear_proj linear_fc1 linear_fc2), or all-linear (every Linear layer but the output head)",
        group=GROUP,
        acts_when=lora_on,
        no_effect="it picks the LoRA adapter's modules (--lora-rank > 0)",
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
    problems = architecture_problems(config) + ([critic] if critic else []) + lora_problems(config)
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


def lora_problems(config: Config) -> list[str]:
    """LoRA's ranges, and its base: the adapter's checkpoints leave the base out, so it must be
    ``--hf-checkpoint`` (a Megatron --ref-load that the policy starts from is not)."""
    from slime_core.checkpoint.directory import is_megatron_checkpoint

    if not config.get("lora_rank"):
        return []
    problems = []
    if config.lora_rank < 0 or config.lora_alpha <= 0:
        problems.append("--lora-rank and --lora-alpha must be positive (or --lora-rank 0: no LoRA)")
    if not 0.0 <= config.lora_dropout < 1.0:
        problems.append(f"--lora-dropout {config.lora_dropout}: a probability in [0, 1)")
    if is_megatron_checkpoint(config.get("ref_load")):
        problems.append(
            "LoRA trains an adapter over --hf-checkpoint, and its checkpoints hold the adapter only: a Megatron "
            "--ref-load cannot be the base; convert it to a Hugging Face directory and give it as --hf-checkpoint"
        )
    return problems


@hookimpl
def slime_register_train_backends(register):
    register("fsdp", "slime_fsdp.rank:FSDPTrainRank")


@hookimpl
def slime_register_critics(register):
    register("fsdp", "slime_fsdp.critic:FSDPCriticRank")
