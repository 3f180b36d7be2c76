"""Every hook a slime plugin can implement (one module per kind: `options`, `registration`,
`lifecycle`).

A plugin is a module or object with functions named like these specs, decorated with
``slime_core.hookimpl``. There are three kinds of hook:

1. options: a package adds its command-line/config options and subcommands;
2. registration: ``slime_register_<things>(register)`` adds named implementations that the
   config then selects by name (``register(name, obj)``; ``obj`` may be the object itself or
   a ``"module:attribute"`` string imported on first use, which keeps plugin modules light);
3. lifecycle: before/after pairs around each phase of the loop.

Unless a spec says otherwise, hooks run in the driver process (the one that runs
``slime run``).
"""

from slime_core.hookspecs.marker import hookspec  # noqa: F401
from slime_core.hookspecs.options import (  # noqa: F401
    slime_add_options,
    slime_resolve_config,
    slime_validate_config,
    slime_add_commands,
)
from slime_core.hookspecs.registration import (  # noqa: F401
    slime_register_train_backends,
    slime_register_critics,
    slime_register_rollout_backends,
    slime_register_routers,
    slime_register_rollout_engines,
    slime_register_reward_functions,
    slime_register_group_filters,
    slime_register_sample_filters,
    slime_register_buffer_filters,
    slime_register_advantage_estimators,
    slime_register_policy_losses,
    slime_register_tis_functions,
    slime_register_pg_loss_reducers,
    slime_register_data_sources,
    slime_register_rollout_functions,
    slime_register_generate_functions,
    slime_register_sample_hooks,
    slime_register_all_groups_hooks,
    slime_register_eval_functions,
    slime_register_router_middlewares,
    slime_register_reward_post_processors,
    slime_register_train_data_converters,
    slime_register_checkpoint_readers,
)
from slime_core.hookspecs.lifecycle import (  # noqa: F401
    slime_before_run,
    slime_after_run,
    slime_before_rollout,
    slime_after_rollout,
    slime_log_rollout,
    slime_before_train_step,
    slime_after_train_step,
    slime_before_weight_update,
    slime_after_weight_update,
    slime_before_eval,
    slime_log_eval,
    slime_after_eval,
    slime_before_save,
    slime_after_save,
)
