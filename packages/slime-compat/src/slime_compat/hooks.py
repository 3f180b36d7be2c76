"""slime's ``--*-path`` flags and what slime-compat does with each.

A mapped flag selects one of our components, an adapter that calls the user's function as
slime does (``args`` first, slime's argument order and return types); a refused flag is
accepted by the parser and reported at config time with the reason, so a launch script
fails before anything starts instead of silently ignoring a function.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PathHook:
    """One of slime's function flags."""

    key: str  # option key (--custom-rm-path -> custom_rm_path)
    help: str
    selects: tuple[str, str] | None = None  # (our option, the adapter's registered name) it sets
    refused: str | None = None  # why slime-compat cannot run it yet

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")


_NO_TRAIN_HOOK = "our train backends compute {what} in slime_core.algorithms, which has no per-run function hook yet"
_MEGATRON = "it runs inside slime's Megatron actor, and slime-megatron has no equivalent extension point yet"

HOOKS: tuple[PathHook, ...] = (
    PathHook("custom_rm_path", "async fn(args, sample) -> reward (with --group-rm: fn(args, samples) -> rewards)",
             selects=("rm_type", "slime.custom_rm")),
    PathHook("custom_generate_function_path", "async fn(args, sample, sampling_params[, evaluation]) -> Sample",
             selects=("generate_function", "slime.custom_generate")),
    PathHook("rollout_function_path", "fn(args, rollout_id, data_source, evaluation=False) -> RolloutFnTrainOutput or list[list[Sample]]",
             selects=("rollout_function", "slime.rollout_function")),
    PathHook("eval_function_path", "fn(args, rollout_id, data_source, evaluation=True) -> RolloutFnEvalOutput or dict",
             selects=("eval_function", "slime.eval_function")),
    PathHook("dynamic_sampling_filter_path", "fn(args, samples) -> DynamicFilterOutput (or bool)",
             selects=("dynamic_sampling_filter", "slime.dynamic_sampling_filter")),
    PathHook("buffer_filter_path", "fn(args, rollout_id, buffer, num_samples) -> list[list[Sample]]",
             selects=("buffer_filter", "slime.buffer_filter")),
    PathHook("data_source_path", "a class DataSource(args) with get_samples(n) / add_samples(groups)",
             selects=("data_source", "slime.data_source")),
    PathHook("custom_rollout_log_function_path", "fn(rollout_id, args, samples, metrics, rollout_time) -> bool",
             refused="our rollout metrics are computed by the loop; use a slime_after_rollout hook (it gets the groups and may add metrics)"),
    PathHook("custom_eval_rollout_log_function_path", "fn(rollout_id, args, data, metrics) -> bool",
             refused="our eval metrics are computed by the eval function; use a slime_after_eval hook (it may add metrics)"),
    PathHook("rollout_sample_hook_path", "fn(args, sample[, evaluation]) -> Sample, after each generation",
             refused="our rollout has no per-sample post-generation hook yet; wrap it into --custom-generate-function-path"),
    PathHook("rollout_sample_filter_path", "fn(args, data) marking samples of the rollout",
             refused="slime's default rollout calls it; ours takes native sample filters (--sample-filter NAME)"),
    PathHook("rollout_all_samples_process_path", "fn(args, all_samples, data_source)",
             refused="slime's default rollout calls it with the dropped groups too; ours does not expose them yet"),
    PathHook("custom_reward_post_process_path", "fn(args, samples) -> (raw_rewards, rewards)",
             refused=_NO_TRAIN_HOOK.format(what="reward normalisation")),
    PathHook("custom_convert_samples_to_train_data_path", "fn(args, samples) -> train data dict",
             refused="our samples go to training as slime_core.rollout_batch.RolloutBatch, which has no conversion hook yet"),
    PathHook("rollout_data_postprocess_path", "fn(args, rollout_data) on each train rank",
             refused=_MEGATRON),
    PathHook("custom_advantage_function_path", "fn(args, ...) -> advantages",
             refused="register an advantage estimator instead (slime_register_advantage_estimators, --advantage-estimator NAME)"),
    PathHook("custom_loss_function_path", "fn(args, batch, logits, sum_of_sample_mean) -> (loss, metrics)",
             refused="register a policy loss instead (slime_register_policy_losses, --loss-type NAME); slime's takes Megatron logits"),
    PathHook("custom_tis_function_path", "fn(args, ...) -> importance weights",
             refused=_NO_TRAIN_HOOK.format(what="truncated importance sampling")),
    PathHook("custom_pg_loss_reducer_function_path", "fn(...) -> reducer of the per-token loss",
             refused=_NO_TRAIN_HOOK.format(what="the loss reduction")),
    PathHook("custom_megatron_init_path", "fn(args) after Megatron is initialised", refused=_MEGATRON),
    PathHook("custom_megatron_before_log_prob_hook_path", "fn(args, model, store_prefix) before each log-prob pass",
             refused=_MEGATRON),
    PathHook("custom_megatron_before_train_step_hook_path", "fn(args, rollout_id, step_id, model, optimizer, opt_param_scheduler)",
             refused=_MEGATRON),
    PathHook("custom_model_provider_path", "fn(pre_process, post_process, vp_stage) -> Megatron model", refused=_MEGATRON),
    PathHook("custom_update_weight_post_write_path", "fn(args, path) after weights are written to disk", refused=_MEGATRON),
    PathHook("custom_config_path", "a YAML of extra settings for the custom functions",
             refused="pass the settings as slime options or in the run's YAML config (slime run CONFIG.yaml)"),
)

#: slime's own functions, named in many launch scripts: (flag key, path) -> our equivalent,
#: selected directly.
_ROLLOUT = "slime.rollout.sglang_rollout.generate_rollout"
_FILTERS = "slime.rollout.filter_hub.dynamic_sampling_filters"
NATIVE_EQUIVALENTS: dict[tuple[str, str], str] = {
    ("rollout_function_path", _ROLLOUT): "default",
    ("eval_function_path", _ROLLOUT): "default",
    ("rollout_function_path", "slime.rollout.sft_rollout.generate_rollout"): "sft",
    ("buffer_filter_path", "slime.rollout.data_source.pop_first"): "fifo",
    ("data_source_path", "slime.rollout.data_source.RolloutDataSourceWithBuffer"): "prompt",
    ("dynamic_sampling_filter_path", f"{_FILTERS}.check_reward_nonzero_std"): "nonzero_std",
    ("dynamic_sampling_filter_path", f"{_FILTERS}.check_reward_nonzero_std_with_fallback"): "nonzero_std_unless_scarce",
}

#: slime's own functions that our loop provides another way: (flag key, path) -> what to use instead.
NATIVE_INSTEAD: dict[tuple[str, str], str] = {
    ("custom_rm_path", "slime.rollout.on_policy_distillation.reward_func"):
        "on-policy distillation is native: --opd-teacher-load TEACHER_DIR --opd-kl-coef C",
    ("custom_reward_post_process_path", "slime.rollout.on_policy_distillation.post_process_rewards"):
        "on-policy distillation is native: --opd-teacher-load TEACHER_DIR --opd-kl-coef C",
    ("rollout_function_path", "slime.rollout.fully_async_rollout.generate_rollout_fully_async"):
        "asynchronous training is native: --train-mode async (generation overlaps training, bounded staleness)",
}


def apply_hooks(config) -> list[str]:
    """Select the adapters of the given ``--*-path`` flags; the refused flags' errors."""
    errors = []
    for hook in HOOKS:
        path = config.get(hook.key)
        if not path:
            continue
        if (hook.key, path) in NATIVE_INSTEAD:
            errors.append(f"{hook.flag} {path}: slime-compat does not run slime's own function here; "
                          f"{NATIVE_INSTEAD[hook.key, path]}")
        elif hook.refused:
            errors.append(f"{hook.flag} {path}: slime-compat cannot run this function yet: {hook.refused}")
        elif (hook.key, path) in NATIVE_EQUIVALENTS:
            setattr(config, hook.selects[0], NATIVE_EQUIVALENTS[hook.key, path])
        else:
            setattr(config, *hook.selects)
    return errors
