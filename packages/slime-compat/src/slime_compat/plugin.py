"""slime-compat's plugin module, found through the ``slime`` entry-point group.

Declares slime's ``--*-path`` flags, selects the adapter of each given one at config time
(or reports why it cannot run yet, `slime_compat.hooks`), and registers the adapters by
``"module:attribute"`` strings, so importing this module imports nothing heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_compat.hooks import HOOKS, apply_hooks
from slime_core import hookimpl

if TYPE_CHECKING:
    from slime_core.config.config import Config

GROUP = "slime functions (slime-compat): module.function, called as THUDM slime calls it"


@hookimpl
def slime_add_options(options):
    from slime_compat.megatron_config import FLAG

    for hook in HOOKS:
        options.add(hook.flag, default=None, nargs=hook.nargs, help=hook.help, group=GROUP)
    options.add(
        FLAG,
        default=None,
        help="slime's YAML of per-role Megatron settings ('megatron: [{role: actor|critic, overrides: {...}}]'): "
        "the actor's set our options of those names, the critic's lr / load set --critic-lr / --critic-load",
        group=GROUP,
    )


@hookimpl
def slime_resolve_config(config: Config):
    from slime_compat.hooks import select_rollout_function, sft_without_labels
    from slime_compat.megatron_config import apply_megatron_config
    from slime_compat.megatron_hooks import pick_megatron

    apply_megatron_config(config)
    pick_megatron(config, HOOKS)
    sft_without_labels(config)
    select_rollout_function(config)


@hookimpl
def slime_validate_config(config: Config):
    from slime_compat.custom_config import custom_config_problems
    from slime_compat.megatron_config import megatron_config_problems
    from slime_compat.train_data import train_data_problems
    from slime_compat.train_options import prepare_train_math

    # prepare_train_math reads --advantage-estimator before apply_hooks replaces it
    return (
        prepare_train_math(config)
        + apply_hooks(config)
        + custom_config_problems(config)
        + megatron_config_problems(config)
        + train_data_problems(config)
    )


@hookimpl
def slime_before_run(config: Config):
    from slime_compat.args import remember_run

    remember_run(config)


@hookimpl
def slime_before_rollout(rollout_id, config: Config):
    from slime_compat.args import remember_run
    from slime_compat.data_source import before_rollout

    remember_run(config)  # the run's config as its parts have it (with the run's network, a copy of before_run's)
    before_rollout(rollout_id, config)


@hookimpl
def slime_before_save(rollout_id, path):
    from slime_compat.data_source import before_save

    before_save(rollout_id)


@hookimpl
def slime_register_reward_functions(register):
    register("slime.custom_rm", "slime_compat.rewards:custom_rm")
    register("slime.opd_zero_reward", "slime_compat.distillation:zero_reward")


@hookimpl
def slime_register_generate_functions(register):
    register("slime.custom_generate", "slime_compat.generate:custom_generate")


@hookimpl
def slime_register_rollout_functions(register):
    register("slime.rollout_function", "slime_compat.rollout:rollout_function")
    register("slime.rollout_function_without_engines", "slime_compat.rollout:rollout_function_without_engines")


@hookimpl
def slime_register_eval_functions(register):
    register("slime.eval_function", "slime_compat.rollout:eval_function")


@hookimpl
def slime_register_group_filters(register):
    register("slime.dynamic_sampling_filter", "slime_compat.filters:dynamic_sampling_filter")


@hookimpl
def slime_register_sample_hooks(register):
    register("slime.rollout_sample_hooks", "slime_compat.rollout_hooks:rollout_sample_hooks")


@hookimpl
def slime_register_sample_filters(register):
    register("slime.rollout_sample_filter", "slime_compat.rollout_hooks:rollout_sample_filter")


@hookimpl
def slime_register_all_groups_hooks(register):
    register("slime.rollout_all_samples_process", "slime_compat.rollout_hooks:rollout_all_samples_process")


@hookimpl
def slime_register_buffer_filters(register):
    register("slime.buffer_filter", "slime_compat.filters:buffer_filter")


@hookimpl
def slime_register_data_sources(register):
    register("slime.data_source", "slime_compat.data_source:SlimeDataSource")


@hookimpl
def slime_register_advantage_estimators(register):
    register("slime.custom_advantage", "slime_compat.train_math:custom_advantage")


@hookimpl
def slime_register_policy_losses(register):
    register("slime.custom_loss", "slime_compat.custom_loss:custom_loss")


@hookimpl
def slime_register_tis_functions(register):
    register("slime.custom_tis", "slime_compat.train_math:custom_tis")


@hookimpl
def slime_register_pg_loss_reducers(register):
    register("slime.custom_pg_loss_reducer", "slime_compat.train_math:custom_pg_loss_reducer")


@hookimpl
def slime_register_reward_post_processors(register):
    register("slime.reward_post_process", "slime_compat.train_data:reward_post_process")


@hookimpl
def slime_register_train_data_converters(register):
    register("slime.convert_samples_to_train_data", "slime_compat.train_data:convert_samples_to_train_data")


@hookimpl
def slime_log_rollout(rollout_id, config: Config, groups, metrics, seconds):
    if config.get("custom_rollout_log_function_path"):
        from slime_compat.rollout_log import log_rollout

        return log_rollout(rollout_id, config, groups, metrics, seconds)


@hookimpl
def slime_log_eval(rollout_id, config: Config, groups, metrics):
    if config.get("custom_eval_rollout_log_function_path"):
        from slime_compat.eval_log import log_eval

        return log_eval(rollout_id, config, groups, metrics)
