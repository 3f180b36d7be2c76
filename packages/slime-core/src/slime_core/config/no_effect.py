"""Options a user set that would change nothing in the configuration they chose.

An option that has no effect is never ignored in silence: ``slime run`` prints a warning for
each one the user gave (in the YAML file or on the command line; defaults are not reported),
naming the option, why it does nothing here and what would make it count. They are warnings,
not errors, because launch scripts (slime's among them) set options for several
configurations at once.

Each option says when it acts (``OptionSet.add(..., acts_when=, no_effect=)``), so a plugin
states the rules of its own options where it declares them; `RULES` holds those of the core
options, attached by `add_core_rules`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from slime_core.config.options import OptionSet, key_to_flag

if TYPE_CHECKING:
    from slime_core.config.config import Config

_MISMATCH_OFF = (
    "the rollout/train mismatch weights are computed with --use-tis (or reported with --get-mismatch-metrics)"
)
_SFT_NO_RATIO = "supervised training (--loss-type sft_loss) has no ratio"

#: core option -> (whether it acts in this config, why not / what makes it act)
RULES: dict[str, tuple[Callable, str]] = {
    "max_staleness": (
        lambda c: c.train_mode == "async",
        "only asynchronous runs train on samples from older weights (--train-mode async)",
    ),
    "update_weights_interval": (
        lambda c: c.train_mode == "async",
        "synchronous runs push weights after every rollout (it applies with --train-mode async)",
    ),
    "mask_offpolicy_in_partial_rollout": (lambda c: c.partial_rollout, "it masks what --partial-rollout continues"),
    "sample_hook": (
        lambda c: c.rollout_function == "default",
        "only the default rollout (--rollout-function default) applies sample hooks",
    ),
    "all_groups_hook": (
        lambda c: c.rollout_function == "default",
        "only the default rollout (--rollout-function default) calls all-groups hooks",
    ),
    "partial_rollout": (
        lambda c: (c.over_sampling_batch_size or 0) > c.rollout_batch_size or c.get("dynamic_sampling_filter"),
        "groups are aborted and continued only when more are in flight than the batch takes "
        "(--over-sampling-batch-size above --rollout-batch-size, or --dynamic-sampling-filter)",
    ),
    "dynamic_sampling_max_groups": (
        lambda c: c.get("dynamic_sampling_filter"),
        "it bounds the groups a --dynamic-sampling-filter may reject",
    ),
    "rollout_node_resource": (
        lambda c: not c.colocate and c.actor_runtime == "ray",
        "colocated engines share the train ranks' bundles (leave out --colocate to place them apart)",
    ),
    "train_node_resource": (lambda c: c.actor_runtime == "ray", "--actor-runtime inprocess places nothing on Ray"),
    "ray_address": (lambda c: c.actor_runtime == "ray", "--actor-runtime inprocess runs without Ray"),
    "kl_loss_coef": (lambda c: c.use_kl_loss, "the KL loss is added with --use-kl-loss"),
    "distributed_timeout_minutes": (
        lambda c: c.actor_num_nodes * c.actor_num_gpus_per_node > 1,
        "it bounds the train ranks' collectives, and one rank has no peer to wait for",
    ),
    "ckpt_step": (lambda c: c.get("load"), "it picks the checkpoint under --load that the run resumes from"),
    "save_retain_count": (
        lambda c: c.get("save") and c.get("save_interval"),
        "it deletes old checkpoints under --save, which a run writes with --save and --save-interval",
    ),
    "use_unbiased_kl": (lambda c: c.use_kl_loss, "it weights the KL loss, which needs --use-kl-loss"),
    "tis_mode": (lambda c: c.use_tis or c.get_mismatch_metrics, _MISMATCH_OFF),
    "tis_clip": (lambda c: c.use_tis or c.get_mismatch_metrics, _MISMATCH_OFF),
    "tis_clip_low": (lambda c: c.use_tis or c.get_mismatch_metrics, _MISMATCH_OFF),
    "get_mismatch_metrics": (
        lambda c: not c.use_tis and c.loss_type != "sft_loss",
        "--use-tis reports the mismatch metrics already, and supervised training "
        "(--loss-type sft_loss) has no rollout log-probs to compare",
    ),
    "use_rollout_logprobs": (lambda c: c.loss_type != "sft_loss", _SFT_NO_RATIO),
    "use_opsm": (lambda c: c.loss_type != "sft_loss", _SFT_NO_RATIO),
    "use_rollout_entropy": (
        lambda c: c.loss_type != "sft_loss",
        "supervised training (--loss-type sft_loss) has no old log-prob pass to take the entropy from",
    ),
    "opsm_delta": (lambda c: c.use_opsm and c.loss_type != "sft_loss", "it is the threshold of --use-opsm"),
    "rollout_id_key": (
        lambda c: not c.calculate_per_token_loss,
        "--calculate-per-token-loss divides by the batch's tokens, not per sample or rollout",
    ),
    "disable_rewards_normalization": (
        lambda c: c.advantage_estimator not in ("ppo", "reinforce_plus_plus"),
        "only group estimators (grpo, gspo, cispo, dr_grpo, reinforce_plus_plus_baseline) "
        "normalise the rewards per group",
    ),
    "disable_grpo_std_normalization": (
        lambda c: (
            c.advantage_estimator not in ("dr_grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo")
            and not c.disable_rewards_normalization
        ),
        "only grpo, gspo and cispo divide by the group std, and not with --disable-rewards-normalization",
    ),
    "value_clip": (
        lambda c: c.advantage_estimator == "ppo",
        "only PPO's critic (--advantage-estimator ppo) has a value loss",
    ),
    "critic_lr": (lambda c: c.advantage_estimator == "ppo", "only PPO (--advantage-estimator ppo) trains a critic"),
    "critic_load": (lambda c: c.advantage_estimator == "ppo", "only PPO (--advantage-estimator ppo) trains a critic"),
    "opd_kl_coef": (
        lambda c: c.get("opd_teacher_load") or c.get("reward_post_process") or c.get("train_data_converter"),
        "on-policy distillation needs a teacher: --opd-teacher-load, or samples that carry teacher_log_probs "
        "(set by a --reward-post-process or --train-data-converter asking a teacher engine)",
    ),
    "max_tokens_per_gpu": (
        lambda c: c.use_dynamic_batch_size,
        "micro-batches are packed up to it with --use-dynamic-batch-size",
    ),
    "micro_batch_size": (
        lambda c: not c.use_dynamic_batch_size and not c.get("true_on_policy_mode"),
        "--use-dynamic-batch-size packs micro-batches by --max-tokens-per-gpu instead, and --true-on-policy-mode "
        "runs each sample alone",
    ),
    "use_dynamic_batch_size": (
        lambda c: not c.get("true_on_policy_mode"),
        "--true-on-policy-mode runs each sample alone in its forward pass",
    ),
    "eps_clip_c": (
        lambda c: c.loss_type != "sft_loss",
        "supervised training (--loss-type sft_loss) has no ratio to clip",
    ),
    **{
        key: (
            lambda c: c.get("eval_prompt_data") or c.get("eval_config"),
            "there is nothing to evaluate (give --eval-prompt-data or --eval-config)",
        )
        for key in (
            "eval_input_key",
            "eval_label_key",
            "eval_tool_key",
            "eval_reward_key",
            "eval_max_prompt_len",
            "eval_max_context_len",
            "eval_min_new_tokens",
        )
    },
    "skip_eval_before_train": (
        lambda c: (c.get("eval_prompt_data") or c.get("eval_config")) and c.get("eval_interval"),
        "only runs that evaluate (--eval-interval with --eval-prompt-data or --eval-config) evaluate before training",
    ),
    "apply_chat_template_kwargs": (
        lambda c: c.apply_chat_template or c.get("eval_config"),
        "the prompts are rendered with the chat template only with --apply-chat-template",
    ),
    **{
        key: (
            lambda c: c.rollout_function == "rollout_buffer",
            "only the rollout buffer (--rollout-buffer-url) reads it",
        )
        for key in ("fetch_trajectory_retry_times", "rollout_task_type")
    },
    "load_debug_rollout_data_subsample": (
        lambda c: c.get("load_debug_rollout_data"),
        "it subsamples the rollouts replayed from --load-debug-rollout-data",
    ),
    "max_engine_restarts": (lambda c: c.use_fault_tolerance, "engines are replaced with --use-fault-tolerance"),
    "generate_max_retries": (lambda c: c.use_fault_tolerance, "samples are generated again with --use-fault-tolerance"),
}


def add_core_rules(options: OptionSet) -> None:
    """Attach `RULES` to the core options (declared already)."""
    for key, (acts_when, reason) in RULES.items():
        options.add_rule(key, acts_when, reason)


def no_effect_warnings(config: Config, options: OptionSet | None = None) -> list[str]:
    """One line for each option the user set that does nothing in this configuration.

    ``options``: the run's declared options; by default those of the installed plugins."""
    if options is None:
        options = _installed_options()
    return [
        f"{key_to_flag(key)} has no effect here: {reason}"
        for key, (acts_when, reason) in options.rules.items()
        if _given(config, key) and not acts_when(config)
    ]


def _given(config: Config, key: str) -> bool:
    """Whether the user set ``key`` (in the YAML file or on the command line)."""
    return key in config and config.sources.get(key, "default") != "default"


def _installed_options() -> OptionSet:
    from slime_core.plugins import Plugins

    options = OptionSet()
    Plugins().add_options(options)
    return options
