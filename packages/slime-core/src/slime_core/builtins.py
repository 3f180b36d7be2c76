"""The core's own plugin: core options, the built-in data source and buffer filter, the
default rollout, generate and eval functions (``slime_core.rollout``: they work with any
rollout backend through its contracts), ``sft``, ``--router none``, and the
advantage estimators, policy losses and TIS functions of ``slime_core.algorithms``.

Built-ins are registered exactly like third-party plugins; references are strings so that
importing this module stays cheap.
"""

from slime_core import hookimpl
from slime_core.config.core_options import add_core_options


@hookimpl
def slime_add_options(options):
    add_core_options(options)


@hookimpl
def slime_add_commands(subparsers):
    from slime_core.cli.report import add_report_command
    from slime_core.cli.tiny_model import add_tiny_model_command

    add_tiny_model_command(subparsers)
    add_report_command(subparsers)


@hookimpl
def slime_register_data_sources(register):
    register("prompt", "slime_core.data.source:PromptDataSource")


@hookimpl
def slime_register_rollout_functions(register):
    register("default", "slime_core.rollout.default:default_rollout")
    register("sft", "slime_core.rollout.sft:sft_rollout")
    register("rollout_buffer", "slime_core.rollout.rollout_buffer:rollout_buffer_rollout")


@hookimpl
def slime_register_generate_functions(register):
    register("default", "slime_core.rollout.generate:generate_sample")


@hookimpl
def slime_register_eval_functions(register):
    register("default", "slime_core.rollout.evaluation:evaluate")


@hookimpl
def slime_register_routers(register):
    register("none", "slime_core.router:DirectRouter.start")


@hookimpl
def slime_register_buffer_filters(register):
    register("fifo", "slime_core.data.buffer:take_oldest")


#: ``--advantage-estimator`` names -> ``slime_core.algorithms.advantages`` functions.
ADVANTAGE_ESTIMATORS = {
    "grpo": "grpo_advantages",
    "gspo": "grpo_advantages",
    "cispo": "grpo_advantages",
    "dr_grpo": "dr_grpo_advantages",
    "reinforce_plus_plus": "reinforce_plus_plus_advantages",
    "reinforce_plus_plus_baseline": "reinforce_plus_plus_baseline_advantages",
    "ppo": "ppo_advantages",
}
#: ``--loss-type`` names -> ``slime_core.algorithms.policy_loss`` functions (``POLICY_LOSSES``).
POLICY_LOSSES = {
    "policy_loss": "ppo_loss_fn",
    "ppo": "ppo_loss_fn",
    "gspo": "gspo_loss_fn",
    "cispo": "cispo_loss_fn",
    "sft_loss": "sft_loss_fn",
}


@hookimpl
def slime_register_advantage_estimators(register):
    for name, function in ADVANTAGE_ESTIMATORS.items():
        register(name, f"slime_core.algorithms.advantages:{function}")


@hookimpl
def slime_register_policy_losses(register):
    for name, function in POLICY_LOSSES.items():
        register(name, f"slime_core.algorithms.policy_loss:{function}")


@hookimpl
def slime_register_tis_functions(register):
    register("truncate", "slime_core.algorithms.mismatch:truncate_tis")
    register("icepop", "slime_core.algorithms.mismatch:icepop_tis")
