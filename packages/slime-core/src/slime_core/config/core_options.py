"""The options slime-core declares (slime's flag names, so launch scripts port easily).

Backends, engines and the router declare their own options through the same hook.
"""

from __future__ import annotations

from slime_core.config import rollout_options as rollout
from slime_core.config import run_options as run
from slime_core.config import train_control
from slime_core.config import training_options as training
from slime_core.config.no_effect import add_core_rules
from slime_core.config.options import OptionSet


def add_core_options(options: OptionSet) -> None:
    """Declare every core option, grouped as `slime run --help` shows them, with the rules of
    when each acts (`slime_core.config.no_effect.RULES`)."""
    for add in (
        run.run_options,
        run.cluster_options,
        rollout.data_options,
        rollout.rollout_options,
        rollout.reward_options,
        training.algorithm_options,
        training.training_options,
        train_control.train_control_options,
        training.weights_options,
        run.checkpoint_options,
        run.fault_tolerance_options,
        run.debug_options,
        run.observability_options,
        train_control.profiling_options,
        _compatibility,
    ):
        add(options)
    add_core_rules(options)


def _compatibility(o: OptionSet) -> None:
    """Flags of slime's and Megatron-LM's launch scripts that have no option of that name here."""
    from slime_core.config.accepted_flags import declare
    from slime_core.config.megatron_lm_flags import MEGATRON_LM_FLAGS
    from slime_core.config.slime_flags import SLIME_FLAGS

    declare(o, SLIME_FLAGS, "accepted from slime's train.py (see docs/coming-from-slime.md)")
    declare(o, MEGATRON_LM_FLAGS, "accepted Megatron-LM flags (see docs/coming-from-slime.md)")
