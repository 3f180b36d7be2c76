"""slime-compat's plugin module, found through the ``slime`` entry-point group.

Declares slime's ``--*-path`` flags, selects the adapter of each given one at config time
(or reports why it cannot run yet, `slime_compat.hooks`), and registers the adapters by
``"module:attribute"`` strings, so importing this module imports nothing heavy.
"""

from slime_core import hookimpl

from slime_compat.hooks import HOOKS, apply_hooks

GROUP = "slime functions (slime-compat): module.function, called as THUDM slime calls it"


@hookimpl
def slime_add_options(options):
    for hook in HOOKS:
        note = f" [not supported yet: {hook.refused}]" if hook.refused else ""
        options.add(hook.flag, default=None, help=hook.help + note, group=GROUP)


@hookimpl
def slime_validate_config(config):
    return apply_hooks(config)


@hookimpl
def slime_before_run(config):
    from slime_compat.args import remember_run

    remember_run(config)


@hookimpl
def slime_register_reward_functions(register):
    register("slime.custom_rm", "slime_compat.rewards:custom_rm")


@hookimpl
def slime_register_generate_functions(register):
    register("slime.custom_generate", "slime_compat.generate:custom_generate")


@hookimpl
def slime_register_rollout_functions(register):
    register("slime.rollout_function", "slime_compat.rollout:rollout_function")


@hookimpl
def slime_register_eval_functions(register):
    register("slime.eval_function", "slime_compat.rollout:eval_function")


@hookimpl
def slime_register_group_filters(register):
    register("slime.dynamic_sampling_filter", "slime_compat.filters:dynamic_sampling_filter")


@hookimpl
def slime_register_buffer_filters(register):
    register("slime.buffer_filter", "slime_compat.filters:buffer_filter")


@hookimpl
def slime_register_data_sources(register):
    register("slime.data_source", "slime_compat.data_source:SlimeDataSource")
