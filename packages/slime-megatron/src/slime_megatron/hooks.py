"""Functions of the user's that the Megatron backend calls inside its train ranks.

The driver's lifecycle hooks (``slime_core.hookspecs``) cannot reach what lives in a train
rank: Megatron's parallel state, the model chunks, the optimizer, the rank's train data. These
options name a function by import path (``package.module:function``), imported in every rank
process; ``config`` is the run's `Config`:

==========================================  ======================================================
option                                      called as (on every train rank)
==========================================  ======================================================
``--megatron-init-hook``                    ``fn(config)`` once Megatron's parallel groups exist,
                                            before any model is built
``--megatron-before-log-probs-hook``        ``fn(config, model_chunks, model)`` before each
                                            log-prob pass; ``model``: "actor", "ref" (reference
                                            weights swapped in) or "teacher"
``--megatron-train-data-hook``              ``fn(config, rollout_id, batch, data)`` once per
                                            rollout, after the advantages, before the first
                                            optimizer step; may change ``data`` in place
``--megatron-before-train-step-hook``       ``fn(config, rollout_id, step, model_chunks, optimizer)``
                                            before each optimizer step, gradients zeroed and the
                                            step's learning rate already set on the optimizer
``--megatron-weights-written-hook``         ``fn(config, path)`` after a disk weight update's
                                            Hugging Face directory is completely written, before
                                            the engines read it
==========================================  ======================================================

``model_chunks`` is a list of megatron modules, one per virtual pipeline stage (one without
``--num-layers-per-virtual-pipeline-stage``): the policy's wrapped in Megatron's DDP, or the
distillation teacher's bare GPTModels.
``batch`` is the replica's `slime_core.rollout_batch.RolloutBatch` and ``data`` its
`slime_core.rank.step.StepTensors` (loss mask, advantages, log-probs as (N, R) tensors).
``--megatron-model-provider`` builds the model instead (`slime_megatron.models.provider`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slime_core.config.options import key_to_flag
from slime_core.plugins.registry import resolve_reference

if TYPE_CHECKING:
    from slime_core.config.config import Config

#: option key -> its help (the functions' signatures are in the module docstring)
HOOK_OPTIONS: dict[str, str] = {
    "megatron_init_hook": "module:function called as fn(config) on each train rank once Megatron's parallel groups "
    "exist",
    "megatron_before_log_probs_hook": "module:function called as fn(config, model_chunks, model) before each log-prob "
    "pass (model: actor, ref or teacher)",
    "megatron_train_data_hook": "module:function called as fn(config, rollout_id, batch, data) on each train rank "
    "after "
    "the advantages, before the first optimizer step; it may change data (StepTensors) in place",
    "megatron_before_train_step_hook": "module:function called as fn(config, rollout_id, step, model_chunks, "
    "optimizer) "
    "before each optimizer step (its learning rate already set)",
    "megatron_weights_written_hook": "module:function called as fn(config, path) on each train rank after a disk "
    "weight "
    "update (--update-weight-transport disk) is written, before the engines read it",
}

#: ``--megatron-model-provider``'s help (`slime_megatron.models.provider`)
PROVIDER_HELP = (
    "module:function called as fn(hf_config, config, pre_process, post_process) -> GPTModel on each train "
    "rank instead of the built-in model of --hf-checkpoint's family (its parameters must take that family's weights)"
)


class RankHooks:
    """The run's hook functions, imported once in this rank's process; a hook not given does nothing."""

    def __init__(self, config: Config, rank: int):
        self.config, self.rank = config, rank
        self.functions = {
            key: (path, resolve_reference(path, key_to_flag(key)))
            for key in HOOK_OPTIONS
            if (path := getattr(config, key, None))
        }

    def fire(self, key: str, *args: Any) -> None:
        """Call hook ``key`` with ``(config, *args)``; an error names the option and the rank."""
        if key not in self.functions:
            return
        path, fn = self.functions[key]
        try:
            fn(self.config, *args)
        except Exception as exc:
            raise RuntimeError(
                f"{key_to_flag(key)} {path} failed on train rank {self.rank}: {type(exc).__name__}: {exc}"
            ) from exc
