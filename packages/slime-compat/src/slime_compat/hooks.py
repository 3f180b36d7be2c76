"""slime's ``--*-path`` flags and what slime-compat does with each.

Each flag selects one of our components, an adapter that calls the user's function as slime
does (``args`` first, slime's argument order and return types), or is called by one of
slime-compat's own hook implementations. A flag that cannot run in this run's configuration
(a Megatron function with another backend, ...) is reported at config time with the reason
(``check``), so a launch script fails before anything starts instead of silently ignoring a
function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slime_compat import distillation
from slime_compat.megatron_hooks import megatron_problems, post_write_problems

if TYPE_CHECKING:
    from slime_core.config.config import Config


@dataclass(frozen=True)
class PathHook:
    """One of slime's function flags."""

    key: str  # option key (--custom-rm-path -> custom_rm_path)
    help: str
    selects: tuple[str, str] | None = None  # (our option, the adapter's registered name or import path) it sets
    # selects nothing: slime-compat's own hook implementations call it (plugin.py)
    check: Callable | None = None  # (config, hook) -> why it cannot run in this run (errors), else it selects
    nargs: str | None = None  # "+": the flag takes several paths
    adds: bool = False  # the option is a list: the adapter is added to the names already there

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")


def custom_loss_problems(config: Config, hook) -> list[str]:
    """Why ``--custom-loss-function-path`` would not run: slime calls it only with
    ``--loss-type custom_loss``, and reduces it per sample or per token, never by a constant."""
    problems = []
    if config.get("loss_type") != "custom_loss":
        problems.append(
            f"{hook.flag}: slime calls it only with --loss-type custom_loss, and --loss-type is "
            f"{config.get('loss_type')}; add --loss-type custom_loss, or drop the flag"
        )
    if config.get("use_constant_denominator"):
        problems.append(
            f"{hook.flag}: slime's sum_of_sample_mean reduces per sample (per token with "
            "--calculate-per-token-loss), never by a constant; drop --use-constant-denominator"
        )
    return problems


_ADAPTER = "slime_compat.megatron_hooks:"  # the Megatron flags select an import path: slime-megatron's options take one

HOOKS: tuple[PathHook, ...] = (
    PathHook(
        "custom_rm_path",
        "async fn(args, sample) -> reward (with --group-rm: fn(args, samples) -> rewards)",
        selects=("rm_type", "slime.custom_rm"),
    ),
    PathHook(
        "custom_generate_function_path",
        "async fn(args, sample, sampling_params[, evaluation]) -> Sample",
        selects=("generate_function", "slime.custom_generate"),
    ),
    PathHook(
        "rollout_function_path",
        "fn(args, rollout_id, data_source, evaluation=False) -> RolloutFnTrainOutput or list[list[Sample]]",
        selects=("rollout_function", "slime.rollout_function"),
    ),
    PathHook(
        "eval_function_path",
        "fn(args, rollout_id, data_source, evaluation=True) -> RolloutFnEvalOutput or dict",
        selects=("eval_function", "slime.eval_function"),
    ),
    PathHook(
        "dynamic_sampling_filter_path",
        "fn(args, samples) -> DynamicFilterOutput (or bool)",
        selects=("dynamic_sampling_filter", "slime.dynamic_sampling_filter"),
    ),
    PathHook(
        "buffer_filter_path",
        "fn(args, rollout_id, buffer, num_samples) -> list[list[Sample]]",
        selects=("buffer_filter", "slime.buffer_filter"),
    ),
    PathHook(
        "data_source_path",
        "a class DataSource(args) with get_samples(n) / add_samples(groups); save(rollout_id) "
        "when a checkpoint is written, load(rollout_id) when the run resumes from it",
        selects=("data_source", "slime.data_source"),
    ),
    PathHook(
        "custom_rollout_log_function_path",
        "fn(rollout_id, args, samples, metrics, rollout_time) -> bool (True: skip the default rollout metrics)",
    ),
    PathHook(
        "custom_eval_rollout_log_function_path",
        "fn(rollout_id, args, data, metrics) -> bool, data: "
        "{dataset: {rewards, truncated, samples}} (True: skip the default eval metrics)",
    ),
    PathHook(
        "rollout_sample_hook_path",
        "hook(args, sample, *, rollout_id, evaluation) -> Sample | None, after each "
        "generation of a training rollout, before the reward (give several paths after one flag)",
        selects=("sample_hook", "slime.rollout_sample_hooks"),
        nargs="+",
        adds=True,
    ),
    PathHook(
        "rollout_sample_filter_path",
        "fn(args, groups) setting sample.remove_sample on the accepted groups",
        selects=("sample_filter", "slime.rollout_sample_filter"),
        adds=True,
    ),
    PathHook(
        "rollout_all_samples_process_path",
        "fn(args, all_groups, data_source) with every group generated, filtered-out ones included",
        selects=("all_groups_hook", "slime.rollout_all_samples_process"),
        adds=True,
    ),
    PathHook(
        "custom_reward_post_process_path",
        "fn(args, samples) -> (raw_rewards, rewards), instead of the group normalisation",
        selects=("reward_post_process", "slime.reward_post_process"),
    ),
    PathHook(
        "custom_convert_samples_to_train_data_path",
        "fn(args, samples) -> train data dict",
        selects=("train_data_converter", "slime.convert_samples_to_train_data"),
    ),
    PathHook(
        "rollout_data_postprocess_path",
        "fn(args, rollout_id, rollout_data) on each train rank after the advantages (Megatron backend)",
        selects=("megatron_train_data_hook", _ADAPTER + "rollout_data_postprocess"),
        check=megatron_problems,
    ),
    PathHook(
        "custom_advantage_function_path",
        "fn(args, rollout_data) setting rollout_data['advantages'] and ['returns']",
        selects=("advantage_estimator", "slime.custom_advantage"),
    ),
    PathHook(
        "custom_loss_function_path",
        "fn(args, batch, logits, sum_of_sample_mean) -> (loss, metrics), with --loss-type custom_loss",
        selects=("loss_type", "slime.custom_loss"),
        check=custom_loss_problems,
    ),
    PathHook(
        "custom_tis_function_path",
        "fn(args, *, pg_loss, train_log_probs, rollout_log_probs, loss_masks, "
        "total_lengths, response_lengths) -> (pg_loss, loss_masks, metrics), with --use-tis",
        selects=("tis_mode", "slime.custom_tis"),
    ),
    PathHook(
        "custom_pg_loss_reducer_function_path",
        "fn(total_lengths, response_lengths, loss_masks, calculate_per_token_loss) -> reducer of the per-token pg loss",
        selects=("pg_loss_reducer", "slime.custom_pg_loss_reducer"),
    ),
    PathHook(
        "custom_megatron_init_path",
        "fn(args) on each train rank once Megatron's parallel groups exist (Megatron backend)",
        selects=("megatron_init_hook", _ADAPTER + "megatron_init"),
        check=megatron_problems,
    ),
    PathHook(
        "custom_megatron_before_log_prob_hook_path",
        "fn(args, model, store_prefix) before each log-prob pass (Megatron backend)",
        selects=("megatron_before_log_probs_hook", _ADAPTER + "before_log_probs"),
        check=megatron_problems,
    ),
    PathHook(
        "custom_megatron_before_train_step_hook_path",
        "fn(args, rollout_id, step_id, model, optimizer, "
        "opt_param_scheduler=None) before each optimizer step (Megatron backend)",
        selects=("megatron_before_train_step_hook", _ADAPTER + "before_train_step"),
        check=megatron_problems,
    ),
    PathHook(
        "custom_model_provider_path",
        "fn(pre_process, post_process[, vp_stage]) -> GPTModel (Megatron backend)",
        selects=("megatron_model_provider", _ADAPTER + "model_provider"),
        check=megatron_problems,
    ),
    PathHook(
        "custom_update_weight_post_write_path",
        "fn(args, version_dir, rollout_engines) after a disk weight update "
        "is written (Megatron backend, --update-weight-transport disk)",
        selects=("megatron_weights_written_hook", _ADAPTER + "weights_written"),
        check=post_write_problems,
    ),
    PathHook(
        "custom_config_path", "a YAML of extra settings set on args for the custom functions (not options of this run)"
    ),
)

#: slime's own functions, named in many launch scripts: (flag key, path) -> our equivalent,
#: selected directly.
_ROLLOUT = "slime.rollout.sglang_rollout.generate_rollout"
_FILTERS = "slime.rollout.filter_hub.dynamic_sampling_filters"
_DEEPGEMM = "slime.backends.megatron_utils.alignment.deepgemm_forward"
SFT_ROLLOUT = "slime.rollout.sft_rollout.generate_rollout"
#: slime's fully asynchronous rollout: our default rollout in --train-mode async (`select_rollout_function`)
FULLY_ASYNC = "slime.rollout.fully_async_rollout.generate_rollout_fully_async"
NATIVE_EQUIVALENTS: dict[tuple[str, str], str] = {
    ("rollout_function_path", _ROLLOUT): "default",
    ("eval_function_path", _ROLLOUT): "default",
    # slime's SFT rollout (chat messages, the multi-turn loss mask) calls no engine
    ("rollout_function_path", SFT_ROLLOUT): "slime.rollout_function_without_engines",
    ("rollout_function_path", FULLY_ASYNC): "default",
    ("buffer_filter_path", "slime.rollout.data_source.pop_first"): "fifo",
    ("data_source_path", "slime.rollout.data_source.RolloutDataSourceWithBuffer"): "prompt",
    ("dynamic_sampling_filter_path", f"{_FILTERS}.check_reward_nonzero_std"): "nonzero_std",
    ("dynamic_sampling_filter_path", f"{_FILTERS}.check_reward_nonzero_std_with_fallback"): "nonzero_std_unless_scarce",
}

#: slime's own functions that our loop provides another way: (flag key, path) -> what to use instead.
NATIVE_INSTEAD: dict[tuple[str, str], str] = {
    **{
        (
            key,
            f"{_DEEPGEMM}.{name}",
        ): "it switches slime's Megatron layers to DeepGEMM kernels; the backends here choose "
        "their own kernels: drop the flag"
        for key, name in (
            ("custom_megatron_before_log_prob_hook_path", "enable_deepgemm_all_forward"),
            ("custom_megatron_before_train_step_hook_path", "enable_deepgemm_all_forward_before_train_step"),
        )
    },
}


def sft_without_labels(config: Config) -> None:
    """slime's SFT rollout trains on chat messages, which have no label (slime's
    ``--label-key`` defaults to none, ours to ``label``): unless a label key is given, read none."""
    if config.get("rollout_function_path") == SFT_ROLLOUT and config.sources.get("label_key", "default") == "default":
        config.label_key = ""
        config.sources["label_key"] = f"--rollout-function-path {SFT_ROLLOUT} (chat messages have no label)"


def select_rollout_function(config: Config) -> None:
    """Select ``--rollout-function-path``'s rollout function before slime's own checks run, which
    ask whether the run's rollout function is the default one (it needs engines, which
    ``--debug-train-only`` does not start); `apply_hooks` selects it again, or refuses it.
    slime's fully asynchronous rollout selects our default rollout in ``--train-mode async``."""
    hook = next(hook for hook in HOOKS if hook.key == "rollout_function_path")
    path = config.get(hook.key)
    if path and (hook.key, path) not in NATIVE_INSTEAD:
        config.rollout_function = NATIVE_EQUIVALENTS.get((hook.key, path), hook.selects[1])
        config.sources["rollout_function"] = f"{hook.flag} {path}"
    if path == FULLY_ASYNC:  # generation overlapping training, with bounded staleness
        config.train_mode = "async"
        config.sources["train_mode"] = f"{hook.flag} {path}"


def apply_hooks(config: Config) -> list[str]:
    """Select the adapters of the given ``--*-path`` flags; the errors of those that cannot run here."""
    errors = []
    for hook in HOOKS:
        path = config.get(hook.key)
        if not path:
            continue
        if isinstance(path, list):  # a flag of several paths (nargs): slime's own functions are single paths
            path = " ".join(path)
        if (hook.key, path) in NATIVE_INSTEAD:
            errors.append(
                f"{hook.flag} {path}: slime-compat does not run slime's own function here; "
                f"{NATIVE_INSTEAD[hook.key, path]}"
            )
        elif problems := distillation.opd_problems(config, hook.flag, path):
            errors += problems
        elif hook.check and (problems := hook.check(config, hook)):
            errors += problems
        elif distillation.uses_native_teacher(config, path):  # slime's OPD functions with --opd-teacher-load
            setattr(config, hook.selects[0], distillation.NATIVE[path])
        elif (hook.key, path) in NATIVE_EQUIVALENTS:
            setattr(config, hook.selects[0], NATIVE_EQUIVALENTS[hook.key, path])
        elif hook.selects:
            _select(config, hook)
    return errors


def _select(config: Config, hook: PathHook) -> None:
    """Set the hook's option to its adapter, or add the adapter to a list option's names."""
    option, name = hook.selects
    if not hook.adds:
        setattr(config, option, name)
    elif name not in (config.get(option) or []):
        setattr(config, option, [*(config.get(option) or []), name])
