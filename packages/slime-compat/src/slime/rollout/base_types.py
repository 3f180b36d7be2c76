"""slime.rollout.base_types: what rollout functions return (see `slime_compat.outputs`)."""

from slime_compat.outputs import RolloutFnEvalOutput, RolloutFnTrainOutput, call_rollout_fn

__all__ = ["RolloutFnEvalOutput", "RolloutFnTrainOutput", "call_rollout_fn"]
