"""slime's Megatron-side function flags, on slime-megatron's extension points.

slime calls these functions inside its Megatron actor; slime-megatron calls native functions
at the same points of its train ranks (``--megatron-*-hook`` and ``--megatron-model-provider``,
see ``slime_megatron.hooks``). Each adapter here has the native signature and calls the
user's function as slime does, with ``args`` (`slime_compat.args.SlimeArgs`) first:

- ``--custom-megatron-init-path``: ``fn(args)``;
- ``--custom-megatron-before-log-prob-hook-path``: ``fn(args, model, store_prefix)``, the
  prefix ``""`` (actor), ``"ref_"`` or ``"teacher_"``;
- ``--custom-megatron-before-train-step-hook-path``: ``fn(args, rollout_id, step_id, model,
  optimizer, opt_param_scheduler)``; there is no Megatron ``OptimizerParamScheduler`` here
  (the learning rate follows ``slime_core.rank.step.lr_factor``), so ``opt_param_scheduler``
  is None, and the step's learning rate is already on ``optimizer.param_groups``, where the
  function may change it for this step;
- ``--custom-model-provider-path``: ``fn(pre_process=, post_process=[, vp_stage=None])``;
- ``--rollout-data-postprocess-path``: ``fn(args, rollout_id, rollout_data)``, slime's dict of
  per-sample lists (`rollout_data`); what the function changes in ``loss_masks``,
  ``advantages`` and the log-probs is trained on;
- ``--custom-update-weight-post-write-path``: ``fn(args, version_dir, rollout_engines)``
  after a disk weight update (``--update-weight-transport disk``) is written, with
  ``rollout_engines`` an empty list (the engines are the driver's here, not the rank's).

They run only with ``--train-backend megatron`` (`megatron_problems` says why not otherwise),
the post-write function only with disk weight updates (`post_write_problems`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_compat.args import slime_args
from slime_compat.functions import accepts, load_function

if TYPE_CHECKING:
    from slime_core.config.config import Config

#: our log-prob model -> slime's ``store_prefix`` for its pass
STORE_PREFIX = {"actor": "", "ref": "ref_", "teacher": "teacher_"}

#: rollout_data keys a function may change -> the `StepTensors` field they go back to
PER_TOKEN_KEYS = {
    "loss_masks": "mask",
    "advantages": "advantages",
    "log_probs": "old",
    "ref_log_probs": "ref",
    "rollout_log_probs": "rollout",
}


def pick_megatron(config: Config, hooks) -> None:
    """slime trains with Megatron by default: a run that gives one of slime's Megatron flags
    (``hooks``: their `slime_compat.hooks.PathHook`) and chooses no backend trains with
    Megatron, as a run giving Megatron's own options does (when slime-megatron is installed)."""
    given = [hook for hook in hooks if hook.check in (megatron_problems, post_write_problems) and config.get(hook.key)]
    if given and "megatron_init_hook" in config and config.sources.get("train_backend", "default") == "default":
        config.train_backend = "megatron"
        config.sources["train_backend"] = f"chosen by {given[0].flag} (slime's default backend)"


def megatron_problems(config: Config, hook) -> list[str]:
    """Why the Megatron flag ``hook`` (a `slime_compat.hooks.PathHook`) cannot run in this
    run: no slime-megatron, another backend, or the native option given as well."""
    option = hook.selects[0]
    native = "--" + option.replace("_", "-")
    if option not in config:
        return [
            f"{hook.flag}: slime calls it in its Megatron actor, and here the Megatron backend does, which is not "
            "installed; pip install slime-megatron and run with --train-backend megatron"
        ]
    backend = config.get("train_backend")
    if backend != "megatron":
        return [
            f"{hook.flag}: slime calls it in its Megatron actor, and only the Megatron backend calls it here; "
            f"--train-backend {backend} would never run it: use --train-backend megatron, or drop the flag"
        ]
    if config.sources.get(option, "default") != "default":
        return [f"{hook.flag} and {native} both name the function for the same place; give one of them"]
    return []


def post_write_problems(config: Config, hook) -> list[str]:
    """`megatron_problems`, and: only disk weight updates write files for the function to publish."""
    problems = megatron_problems(config, hook)
    if config.get("update_weight_mode") == "delta":
        return problems + [
            f"{hook.flag}: here slime calls it after the Megatron backend writes a full Hugging Face directory, "
            "which --update-weight-mode delta never does (its versions are written by the driver); drop one of the two"
        ]
    if problems or config.get("update_weight_transport") == "disk":
        return problems
    transport = config.get("update_weight_transport") or "the default transport (tensor or broadcast)"
    return [
        f"{hook.flag}: slime calls it after a disk weight update, and this run's weights reach the engines by "
        f"{transport}, which writes no files; add --update-weight-transport disk, or drop the flag"
    ]


def megatron_init(config: Config) -> None:
    """``--megatron-init-hook``: slime's ``fn(args)``."""
    load_function(config.custom_megatron_init_path)(slime_args(config))


def before_log_probs(config: Config, model_chunks, model: str) -> None:
    """``--megatron-before-log-probs-hook``: slime's ``fn(args, model, store_prefix)``."""
    fn = load_function(config.custom_megatron_before_log_prob_hook_path)
    fn(slime_args(config), model_chunks, STORE_PREFIX[model])


def before_train_step(config: Config, rollout_id: int, step: int, model_chunks, optimizer) -> None:
    """``--megatron-before-train-step-hook``: slime's ``fn(args, rollout_id, step_id, model,
    optimizer, opt_param_scheduler)``, with no scheduler (see the module docstring)."""
    fn = load_function(config.custom_megatron_before_train_step_hook_path)
    fn(slime_args(config), rollout_id, step, model_chunks, optimizer, None)


def model_provider(hf_config, config: Config, pre_process: bool, post_process: bool):
    """``--megatron-model-provider``: slime's ``fn(pre_process, post_process[, vp_stage])``
    (no virtual pipeline stages here: ``vp_stage`` is None)."""
    fn = load_function(config.custom_model_provider_path)
    extra = {"vp_stage": None} if accepts(fn, "vp_stage") else {}
    try:
        return fn(pre_process=pre_process, post_process=post_process, **extra)
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("megatron.training"):
            raise
        raise ModuleNotFoundError(
            f"--custom-model-provider-path {config.custom_model_provider_path} imports {exc.name}, Megatron-LM's "
            "training package, which slime-megatron does not use (only megatron-core); build the TransformerConfig "
            "in the provider, e.g. from values a --custom-megatron-init-path function kept from args",
            name=exc.name,
        ) from exc


def weights_written(config: Config, path: str) -> None:
    """``--megatron-weights-written-hook``: slime's ``fn(args, version_dir, rollout_engines)``."""
    load_function(config.custom_update_weight_post_write_path)(slime_args(config), path, [])


def rollout_data_postprocess(config: Config, rollout_id: int, batch, data) -> None:
    """``--megatron-train-data-hook``: slime's ``fn(args, rollout_id, rollout_data)``; the
    per-token lists it leaves in ``rollout_data`` are what the rank trains on."""
    rollout_data = as_rollout_data(batch, data)
    load_function(config.rollout_data_postprocess_path)(slime_args(config), rollout_id, rollout_data)
    take_back(rollout_data, batch, data)


def as_rollout_data(batch, data) -> dict:
    """slime's ``rollout_data`` of a rank's ``batch`` (`RolloutBatch`) and ``data``
    (`StepTensors`): per-sample lists, the per-token ones as CPU tensors of response length
    (``loss_masks`` int, the rest float32). ``log_probs`` is left out when π_old comes from
    the training forward itself (slime skips that pass then too); slime's ``returns`` are not
    kept here. With ``--use-rollout-entropy``, ``entropy`` / ``ref_entropy``: each sample's
    per-token entropy of π_old / the reference model (read only: training does not read them)."""
    import torch

    lengths = batch.response_lengths
    out = {
        "tokens": [torch.tensor(t) for t in batch.tokens],
        "response_lengths": list(lengths),
        "total_lengths": [len(t) for t in batch.tokens],
        "rewards": list(batch.rewards),
    }
    for key, field in PER_TOKEN_KEYS.items():
        tensor = getattr(data, field)
        if tensor is not None and not (key == "log_probs" and data.old_from_forward):
            out[key] = [tensor[i, :n].clone() for i, n in enumerate(lengths)]
    out["loss_masks"] = [mask.int() for mask in out["loss_masks"]]
    for key, model in (("entropy", "actor"), ("ref_entropy", "ref")):  # --use-rollout-entropy; read only
        if (data.entropy or {}).get(model):
            out[key] = [h.clone() for h in data.entropy[model]]
    return out


def take_back(rollout_data: dict, batch, data) -> None:
    """Write the per-token lists of ``rollout_data`` back into ``data``; tokens and lengths,
    from which the micro-batches are planned, must be as they were."""
    lengths = batch.response_lengths
    if rollout_data["response_lengths"] != lengths or [t.tolist() for t in rollout_data["tokens"]] != batch.tokens:
        raise ValueError(
            "--rollout-data-postprocess-path changed rollout_data's tokens or response_lengths, which "
            "training here reads from the rollout itself; change loss_masks or advantages instead"
        )
    for key, field in PER_TOKEN_KEYS.items():
        target = getattr(data, field)
        if key not in rollout_data or target is None:
            continue
        for i, (row, n) in enumerate(zip(rollout_data[key], lengths)):
            if len(row) != n:
                raise ValueError(
                    f"--rollout-data-postprocess-path left rollout_data['{key}'][{i}] with {len(row)} "
                    f"values for a response of {n} tokens; keep one value per response token"
                )
            target[i, :n] = row.to(target.dtype) if hasattr(row, "to") else target.new_tensor(row)
