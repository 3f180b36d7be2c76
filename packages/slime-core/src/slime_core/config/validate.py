"""Checks that span several options: required options, the batch constraint, data paths."""

from __future__ import annotations

import math
from pathlib import Path

from slime_core.config import train_control
from slime_core.config.accepted_flags import architecture_problems
from slime_core.config.config import Config
from slime_core.config.options import OptionSet, key_to_flag
from slime_core.data.eval_datasets import eval_config_problems
from slime_core.data.prompt_dataset import chat_template_kwargs_problems
from slime_core.data.slicing import split_path_slice
from slime_core.multimodal.checks import multimodal_problems
from slime_core.routing_replay import replay_problems


def validate(config: Config, options: OptionSet) -> list[str]:
    """Every cross-option problem in ``config``."""
    errors = [
        f"{option.flag} is required: {option.help}"
        for option in options.options.values()
        if option.required and config.get(option.key) is None
    ]
    errors += _check_batch(config)
    errors += eval_config_problems(config) or _check_data_paths(config)
    errors += chat_template_kwargs_problems(config)
    errors += _check_rollout_buffer(config)
    errors += _check_batching(config)
    errors += _check_debug(config)
    errors += _check_fault_tolerance(config)
    errors += _check_resume(config)
    errors += _check_top_p(config)
    errors += _check_context_len(config)
    errors += _check_nonfinite(config)
    errors += _check_delta_sync(config)
    errors += _check_true_on_policy(config)
    errors += architecture_problems(config)
    errors += replay_problems(config)
    errors += multimodal_problems(config)
    errors += train_control.problems(config)
    return errors


def _check_delta_sync(config: Config) -> list[str]:
    """``--update-weight-mode delta`` as THUDM/slime allows it: from disk, into a local checkpoint, not colocated."""
    if config.get("update_weight_mode") != "delta":
        return []
    errors = []
    if config.get("update_weight_transport") not in (None, "disk"):
        errors.append(
            f"--update-weight-mode delta publishes files: it needs --update-weight-transport disk, "
            f"not {config.update_weight_transport}"
        )
    if not config.get("update_weight_local_checkpoint_dir"):
        errors.append(
            "--update-weight-mode delta needs --update-weight-local-checkpoint-dir: the engine hosts' local "
            "copy of the checkpoint that the deltas patch (a local disk on each host)"
        )
    if config.get("colocate"):
        errors.append(
            "--update-weight-mode delta is for engines apart from the trainer; colocated (--colocate) the "
            "weights move in memory, where diffing them only adds work: drop one of the two"
        )
    return errors


def _check_true_on_policy(config: Config) -> list[str]:
    """``--true-on-policy-mode`` compares log-probs of the whole vocabulary; a nucleus is renormalised apart."""
    if config.get("true_on_policy_mode") and (config.get("rollout_top_p") or 1.0) < 1.0:
        return [
            "--true-on-policy-mode needs log-probs over the whole vocabulary, and --rollout-top-p < 1 renormalises "
            "them over each token's nucleus: drop one of the two"
        ]
    return []


def _check_top_p(config: Config) -> list[str]:
    """Nucleus thresholds are probabilities."""
    return [
        f"{key_to_flag(key)} must be in (0, 1] (1: no nucleus), got {config.get(key)}"
        for key in ("rollout_top_p", "eval_top_p")
        if config.get(key) is not None and not 0 < config.get(key) <= 1
    ]


def _check_rollout_buffer(config: Config) -> list[str]:
    """The rollout buffer's trajectories carry no engine log-probs to train on."""
    if config.get("rollout_function") != "rollout_buffer":
        return []
    if not config.get("rollout_buffer_url"):
        return ["--rollout-function rollout_buffer needs --rollout-buffer-url: the address of the rollout buffer"]
    return [
        f"{key_to_flag(key)} trains on the engine's log-probs, which the rollout buffer's trajectories do not carry; "
        "drop it with --rollout-buffer-url"
        for key in ("use_tis", "use_rollout_logprobs")
        if config.get(key)
    ]


def _check_context_len(config: Config) -> list[str]:
    """``--rollout-max-context-len`` as slime reads it: the prompt limit (one token less unless
    given, `slime_core.config.resolve`) may not exceed one token less."""
    context = config.get("rollout_max_context_len")
    if context is None:
        return []
    if context < 2:
        return [f"--rollout-max-context-len must be at least 2 (a prompt token and a response token), got {context}"]
    prompt = config.get("rollout_max_prompt_len")
    if prompt is not None and prompt > context - 1:
        return [
            f"--rollout-max-prompt-len {prompt} leaves no room for a response within --rollout-max-context-len "
            f"{context}: lower it to at most {context - 1} (or raise the context length)"
        ]
    return []


def _check_debug(config: Config) -> list[str]:
    """The debug modes exclude each other; replaying rollouts means training only (resolved)."""
    errors = []
    for key in ("save_debug_rollout_data", "load_debug_rollout_data"):
        template = config.get(key)
        if template and "{rollout_id}" not in template:
            errors.append(
                f"{key_to_flag(key)} {template}: put {{rollout_id}} in the path (one file per rollout), "
                "e.g. dbg/rollout_{rollout_id}.json"
            )
    if (
        config.get("debug_train_only")
        and not config.get("load_debug_rollout_data")
        and config.get("rollout_function") == "default"
    ):
        errors.append(
            "--debug-train-only starts no engines, and the default rollout function needs them: replay "
            "saved rollouts with --load-debug-rollout-data PATH_{rollout_id} (written by a run with "
            "--save-debug-rollout-data), or use a rollout function that needs none (--rollout-function sft)"
        )
    share = config.get("load_debug_rollout_data_subsample")
    if share is not None and not 0 < share <= 1:
        errors.append(f"--load-debug-rollout-data-subsample is the share of samples to replay, in (0, 1]; got {share}")
    if config.get("debug_train_only") and config.get("debug_rollout_only"):
        errors.append("--debug-rollout-only and --debug-train-only (or --load-debug-rollout-data) exclude each other")
    return errors


def _check_resume(config: Config) -> list[str]:
    errors = []
    if (config.get("ckpt_step") or 0) < 0:
        errors.append(f"--ckpt-step must be a rollout id (0 or more), got {config.ckpt_step}")
    if config.get("save_retain_count") is not None and config.save_retain_count < 1:
        errors.append(
            f"--save-retain-count keeps the newest N checkpoints, N 1 or more (got {config.save_retain_count}); "
            "leave it out to keep every checkpoint"
        )
    return errors


def _check_fault_tolerance(config: Config) -> list[str]:
    if not config.get("use_fault_tolerance"):
        return []
    return [
        f"{key_to_flag(key)} must be positive, got {config.get(key)}"
        for key in ("rollout_health_check_interval", "rollout_health_check_timeout")
        if config.get(key) <= 0
    ]


def _check_nonfinite(config: Config) -> list[str]:
    """A default reward that is itself NaN, and a skip limit that could never stop a run."""
    errors = []
    failure_reward = config.get("rm_failure_reward")
    if failure_reward is not None and not math.isfinite(failure_reward):
        errors.append(
            f"--rm-failure-reward {failure_reward}: failed samples would be trained on a non-finite reward; "
            "give a finite number"
        )
    limit = config.get("max_consecutive_skipped_steps")
    if limit is not None and limit < 1:
        errors.append(f"--max-consecutive-skipped-steps must be at least 1, got {limit}")
    return errors


def _check_batching(config: Config) -> list[str]:
    """Packed micro-batches need a token budget."""
    if config.get("use_dynamic_batch_size") and not config.get("max_tokens_per_gpu"):
        return [
            "--use-dynamic-batch-size packs micro-batches up to --max-tokens-per-gpu tokens; set --max-tokens-per-gpu "
            "too"
        ]
    return []


def _check_batch(config: Config) -> list[str]:
    """slime's constraint: rollout_batch_size × n_samples_per_prompt = global_batch_size × num_steps_per_rollout.

    A missing global_batch_size or num_steps_per_rollout was derived from the others where they
    allow it (`slime_core.config.resolve`); here the case that does not is reported.
    """
    if "rollout_batch_size" not in config or config.rollout_batch_size is None:
        return []
    errors = [
        f"{key_to_flag(key)} must be a positive integer, got {config.get(key)}"
        for key in ("rollout_batch_size", "n_samples_per_prompt", "global_batch_size", "num_steps_per_rollout")
        if config.get(key) is not None and config.get(key) <= 0
    ]
    if errors:
        return errors
    rb, n = config.rollout_batch_size, config.n_samples_per_prompt
    gb, steps = config.global_batch_size, config.num_steps_per_rollout
    total = rb * n
    per_rollout = f"rollout_batch_size × n_samples_per_prompt = {rb} × {n} = {total} samples per rollout"
    if gb is None:
        steps = steps or 1
        if total % steps:
            return [
                f"{per_rollout}, which does not split into {steps} optimizer steps; pick --num-steps-per-rollout "
                f"dividing {total}"
            ]
    elif steps is None:
        if total % gb:
            return [
                f"{per_rollout}, which is not a multiple of --global-batch-size {gb}; pick a global batch size "
                f"dividing {total}"
            ]
    elif gb * steps != total:
        return [
            f"{per_rollout}, but global_batch_size × num_steps_per_rollout = {gb} × {steps} = {gb * steps}; "
            f"they must be equal: set --num-steps-per-rollout {total // gb if total % gb == 0 else '?'} "
            f"or --global-batch-size {total // steps if total % steps == 0 else '?'}, or leave one unset to derive it"
        ]
    return []


def _check_data_paths(config: Config) -> list[str]:
    errors = []
    if config.get("prompt_data"):
        errors += _missing_file("--prompt-data", config.prompt_data)
    eval_data = config.get("eval_prompt_data") or []
    if len(eval_data) % 2:
        errors.append(f"--eval-prompt-data takes NAME PATH pairs, got {len(eval_data)} values: {' '.join(eval_data)}")
    else:
        for name, path in zip(eval_data[::2], eval_data[1::2]):
            errors += _missing_file(f"--eval-prompt-data {name}", path)
    return errors


def _missing_file(flag: str, spec: str) -> list[str]:
    path, _ = split_path_slice(spec)
    if Path(path).is_file():
        return []
    return [
        f"{flag}: data file '{path}' does not exist; check the path (relative paths start at the current directory)"
    ]
