"""What a run checks before any process starts, so that a mistake is reported at once with
the other config errors instead of ~40 s later as a traceback from a Ray actor: the model
directories, the checkpoint to resume, the loss options, and options that would have no
effect in the chosen configuration (the prompt files: `slime_core.data.checks`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from slime_core.checkpoint.directory import is_megatron_checkpoint, megatron_checkpoint
from slime_core.config.options import key_to_flag

if TYPE_CHECKING:
    from slime_core.config import Config

#: options naming a Hugging Face model directory (``--ref-load`` may also be a Megatron checkpoint)
MODEL_DIRS = ("hf_checkpoint", "opd_teacher_load", "critic_load")
#: built-in advantage estimators whose advantages carry no per-token reward (so no --kl-coef)
REWARD_KL_FREE = ("grpo", "gspo", "cispo", "dr_grpo")


def preflight_problems(config: Config, trains: bool) -> list[str]:
    """Every problem found; ``trains``: whether the run trains (not --debug-rollout-only)."""
    problems = model_dir_problems(config) + load_problems(config)
    if trains:
        problems += loss_problems(config) + kl_coef_problems(config)
    return problems


def model_dir_problems(config: Config) -> list[str]:
    """Each model option names a directory whose config.json is a JSON object with a model_type;
    ``--ref-load`` may instead be a Megatron checkpoint (`megatron_checkpoint`)."""
    checks = [(key, _model_dir_problem) for key in MODEL_DIRS] + [("ref_load", _reference_problem)]
    problems = []
    for key, check in checks:
        path = config.get(key)
        if path:
            problem = check(Path(path))
            if problem:
                problems.append(f"{key_to_flag(key)} {path}: {problem}")
    return problems


def _reference_problem(path: Path) -> str | None:
    """``--ref-load``: a Hugging Face model directory, or a Megatron checkpoint (slime's launch
    scripts give the latter: its weights, from tools/convert_hf_to_torch_dist.py)."""
    layouts = (
        "a Hugging Face model directory (config.json, weights) or a Megatron checkpoint directory "
        "(latest_checkpointed_iteration.txt naming its iter_XXXXXXX or release directory)"
    )
    if not path.is_dir():
        return f"no such directory; give {layouts}"
    if is_megatron_checkpoint(path):
        try:
            megatron_checkpoint(path)
        except (FileNotFoundError, ValueError) as exc:
            return str(exc)
        return None
    if not (path / "config.json").is_file():
        return f"has no config.json and no latest_checkpointed_iteration.txt; give {layouts}"
    return _model_dir_problem(path)


def _model_dir_problem(path: Path) -> str | None:
    if not path.is_dir():
        return "no such directory; give a Hugging Face model directory (config.json, weights, tokenizer)"
    config_file = path / "config.json"
    if not config_file.is_file():
        return "has no config.json: not a Hugging Face model directory (save one with save_pretrained)"
    try:
        model_config = json.loads(config_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return f"config.json is not valid JSON ({exc}); the directory is damaged: save or download it again"
    if not isinstance(model_config, dict) or "model_type" not in model_config:
        return "config.json names no model_type; it was not written by transformers' save_pretrained"
    return None


def load_problems(config: Config) -> list[str]:
    """``--load`` is a checkpoint directory: existing (an empty one starts fresh), its latest pointer intact,
    holding the ``--ckpt-step`` checkpoint if one is named, and its critic's when the run is PPO.
    (``--load X --save X`` with no X yet was dropped by `slime_core.config.resolve`: a fresh start.)"""
    if not config.get("load"):
        return []
    from slime_core.checkpoint.directory import missing_critic, resume_checkpoint

    try:
        resume_checkpoint(config, "a run with --save")
    except (FileNotFoundError, ValueError) as exc:
        return [str(exc)]
    problem = missing_critic(config)
    return [problem] if problem else []


def loss_problems(config: Config) -> list[str]:
    """The loss options as a train rank reads them (e.g. a dual-clip bound that is not > 1)."""
    from slime_core.rank.policy_loss_config import PolicyLossConfig

    try:
        PolicyLossConfig.from_config(config)
    except ValueError as exc:
        lines = [line.strip() for line in str(exc).splitlines()[1:] if line.strip()]
        return [f"loss options: {line}" for line in lines] or [str(exc)]
    return []


def kl_coef_problems(config: Config) -> list[str]:
    """``--kl-coef`` puts a KL penalty into the per-token reward; the group-relative estimators
    have none to put it in, so there it would be silently ignored."""
    if config.get("kl_coef") and config.advantage_estimator in REWARD_KL_FREE:
        return [
            f"--kl-coef {config.kl_coef} penalises the per-token reward, which --advantage-estimator "
            f"{config.advantage_estimator} does not use (its advantages are group-relative): it would have no "
            "effect. Keep the policy near the reference with --use-kl-loss --kl-loss-coef C instead, or use "
            "reinforce_plus_plus / reinforce_plus_plus_baseline"
        ]
    return []
