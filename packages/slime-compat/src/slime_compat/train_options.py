"""Config-time side of slime's train-side math flags (`slime_compat.train_math` runs them).

``--custom-advantage-function-path`` replaces our ``--advantage-estimator`` with its adapter,
but in slime the estimator's name still decides two things, kept here through our own
options before the name is replaced: the rewards the function sees (slime centres them per
group for grpo, gspo, cispo and reinforce_plus_plus_baseline, and divides by the group std
for the first three) and the policy loss (gspo and cispo select their own). With ``ppo``
slime hands the function its critic's values; our critic trains only under the built-in
estimator, so that pair is refused.

``--custom-tis-function-path`` is called only with ``--use-tis`` (our
``--get-mismatch-metrics`` reports without reweighting, see slime_core.algorithms.loss);
without either the function would be ignored, which is said.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slime_core.config.config import Config

ADAPTER = "slime.custom_advantage"
#: slime's estimators whose rewards its reward post-processing centres per group ...
_CENTRED = ("grpo", "gspo", "cispo", "dr_grpo", "reinforce_plus_plus_baseline")
#: ... and divides by the group std.
_STD = ("grpo", "gspo", "cispo")
_OWN_LOSS = ("gspo", "cispo")


def prepare_train_math(config: Config) -> list[str]:
    """Keep what the advantage estimator's name means in slime before its adapter replaces
    it; warn about a TIS function that would not be called. Returns the config errors."""
    if config.get("custom_tis_function_path") and not (config.use_tis or config.get_mismatch_metrics):
        print(
            f"slime run: warning: --custom-tis-function-path {config.custom_tis_function_path} has no effect "
            "here: slime calls it with --use-tis (or --get-mismatch-metrics); add --use-tis",
            file=sys.stderr,
        )
    estimator = config.advantage_estimator
    if not config.get("custom_advantage_function_path") or estimator == ADAPTER:
        return []
    if estimator == "ppo":
        return [
            f"--custom-advantage-function-path {config.custom_advantage_function_path} with --advantage-estimator "
            "ppo: slime hands the function its critic's values, and our critic trains only under the built-in ppo "
            "estimator; use another --advantage-estimator, or register a native estimator (--advantage-estimator NAME)"
        ]
    if estimator not in _CENTRED:
        config.disable_rewards_normalization = True
    elif estimator not in _STD:
        config.disable_grpo_std_normalization = True
    if estimator in _OWN_LOSS and config.loss_type == "policy_loss":
        config.loss_type = estimator
    return []
