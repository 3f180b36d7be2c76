"""The evaluation datasets of a run, each with its record keys, prompt lengths, sampling and reward.

They come from ``--eval-prompt-data NAME PATH ...``, or from slime's ``--eval-config`` YAML
(which replaces it; ``eval:`` at the root is optional)::

    eval:
      defaults: {max_response_len: 64, top_p: 0.7}
      datasets:
        - name: aime
          path: /data/aime.jsonl
          rm_type: math
          n_samples_per_eval_prompt: 4
          apply_chat_template_kwargs: {enable_thinking: false}

(``datasets`` may also be a mapping from name to entry.) Each value is taken, as slime takes it,
from the dataset's entry, else ``defaults``, else the ``--eval-*`` flag, else the rollout's
(``--eval-input-key`` before ``--input-key``, ``--eval-temperature`` before ``--rollout-temperature``).
``rm_type`` and ``metadata_overrides`` go into each prompt's metadata (the reward hub reads
``metadata["rm_type"]`` before ``--rm-type``). slime's keys that this slime has no counterpart
for are refused by name, so an entry never loses a setting in silence.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from slime_core.data.prompt_dataset import PromptFormat, chat_template_kwargs, multimodal_keys

if TYPE_CHECKING:
    from slime_core.config import Config

#: dataset keys -> the flags they fall back to, in order (slime's ``eval_config`` specs)
_FALLBACKS: dict[str, tuple[str, ...]] = {
    "input_key": ("eval_input_key", "input_key"),
    "label_key": ("eval_label_key", "label_key"),
    "tool_key": ("eval_tool_key", "tool_key"),
    "metadata_key": ("metadata_key",),
    "apply_chat_template": ("apply_chat_template",),
    "apply_chat_template_kwargs": (),  # --apply-chat-template-kwargs, parsed (`chat_template_kwargs`)
    "n_samples_per_eval_prompt": ("n_samples_per_eval_prompt",),
    "temperature": ("eval_temperature", "rollout_temperature"),
    "top_p": ("eval_top_p", "rollout_top_p"),
    "top_k": ("eval_top_k", "rollout_top_k"),
    "max_response_len": ("eval_max_response_len", "rollout_max_response_len"),
    "stop": ("rollout_stop",),
    "stop_token_ids": ("rollout_stop_token_ids",),
    "min_new_tokens": ("eval_min_new_tokens",),
    "rm_type": (),
    "metadata_overrides": (),
}
#: slime's dataset keys that have no counterpart here (refused by name)
_UNSUPPORTED = (
    "custom_rm_path",
    "multimodal_keys",
    "repetition_penalty",
    "skip_special_tokens",
    "no_stop_trim",
    "custom_generate_function_path",
    "app_service",
    "eval_task_timeout",
    "min_eval_samples",
    "eval_early_stop_remaining",
    "eval_early_stop_idle_timeout",
    "message_processor",
    "reward_model",
    "remote_environment",
)


class EvalConfigError(ValueError):
    """An ``--eval-config`` file that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class EvalDataset:
    """One evaluation dataset, its values resolved (see the module docstring)."""

    name: str
    path: str  # the prompt file (``PATH@[a:b]`` for a slice)
    format: PromptFormat  # record keys, chat template and prompt length limit
    n_samples: int  # responses per prompt
    sampling: dict[str, Any]  # max_response_len, temperature, top_p, top_k, stop, stop_token_ids, min_new_tokens
    max_context_len: int | None  # prompt plus response tokens (--eval-max-context-len)
    metadata: dict[str, Any] = field(default_factory=dict)  # merged into each prompt's metadata (rm_type, ...)
    where: str = ""  # where it was declared, for messages ("--eval-config FILE dataset NAME")
    response_flag: str = "--eval-max-response-len"  # where sampling["max_response_len"] comes from, for messages


def eval_datasets(config: Config) -> list[EvalDataset]:
    """The run's evaluation datasets (`EvalConfigError` for a bad ``--eval-config``)."""
    if config.get("eval_config"):
        path = config.eval_config
        defaults, entries = read_eval_config(path)
        return [
            _resolve(config, entry, defaults, f"--eval-config {path} dataset '{entry['name']}'") for entry in entries
        ]
    pairs = config.get("eval_prompt_data") or []
    return [flag_eval_dataset(config, name, spec) for name, spec in zip(pairs[::2], pairs[1::2])]


def flag_eval_dataset(config: Config, name: str, path: str) -> EvalDataset:
    """A dataset with the settings of the flags alone (``--eval-prompt-data NAME PATH``)."""
    return _resolve(config, {"name": name, "path": path}, {}, f"--eval-prompt-data {name}")


def read_eval_config(path: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(defaults, dataset entries)`` of slime's eval YAML, each entry checked."""
    try:
        root = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise EvalConfigError(f"--eval-config {path}: cannot read it ({exc.strerror}); check the path") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        raise EvalConfigError(f"--eval-config {where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    section = root.get("eval", root) if isinstance(root, dict) else None
    if not isinstance(section, dict):
        raise EvalConfigError(f"--eval-config {path}: expected a mapping with `eval: {{datasets: [...]}}` at the root")
    defaults = section.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise EvalConfigError(f"--eval-config {path}: eval.defaults must be a mapping of dataset keys")
    _check_keys(defaults, f"--eval-config {path} eval.defaults", allowed=set(_FALLBACKS))
    entries = _entries(section.get("datasets"), path)
    for index, entry in enumerate(entries):
        _check_entry(entry, f"--eval-config {path} eval.datasets[{index}]")
    return defaults, entries


def _entries(datasets: Any, path: str) -> list[dict[str, Any]]:
    """The dataset entries, from a list of mappings or a mapping from name to entry."""
    if isinstance(datasets, dict):
        datasets = [{"name": name, **entry} if isinstance(entry, dict) else entry for name, entry in datasets.items()]
    if not isinstance(datasets, list) or not datasets:
        raise EvalConfigError(f"--eval-config {path}: no datasets under eval.datasets; list {{name, path}} entries")
    for index, entry in enumerate(datasets):
        if not isinstance(entry, dict):
            raise EvalConfigError(f"--eval-config {path} eval.datasets[{index}]: expected a mapping, got {entry!r}")
    return [dict(entry) for entry in datasets]


def _check_entry(entry: dict[str, Any], where: str) -> None:
    for key in ("name", "path"):
        if not isinstance(entry.get(key), str) or not entry.get(key):
            raise EvalConfigError(f"{where}: `{key}` is missing; every dataset needs a name and a path")
    _check_keys(entry, f"{where} ('{entry['name']}')", allowed={"name", "path", *_FALLBACKS})


def _check_keys(mapping: dict[str, Any], where: str, allowed: set[str]) -> None:
    for key in mapping:
        if key in _UNSUPPORTED:
            raise EvalConfigError(f"{where}: slime's `{key}` is not supported by this slime; remove it")
        if key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f"; did you mean `{close[0]}`?" if close else f"; known keys: {', '.join(sorted(allowed))}"
            raise EvalConfigError(f"{where}: unknown key `{key}`{hint}")


def _resolve(config: Config, entry: dict[str, Any], defaults: dict[str, Any], where: str) -> EvalDataset:
    def pick(key: str) -> Any:
        if key in entry:
            return entry[key]
        if key in defaults:
            return defaults[key]
        return next((config.get(flag) for flag in _FALLBACKS[key] if config.get(flag) is not None), None)

    def source(key: str) -> str:
        """Where ``pick(key)`` came from, said as the user wrote it."""
        if key in entry:
            return f"{where} {key}"
        if key in defaults:
            return f"--eval-config {config.eval_config} eval.defaults {key}"
        flag = next((flag for flag in _FALLBACKS[key] if config.get(flag) is not None), _FALLBACKS[key][0])
        return "--" + flag.replace("_", "-")

    kwargs = pick("apply_chat_template_kwargs")
    fmt = PromptFormat(
        input_key=pick("input_key"),
        label_key=pick("label_key") or None,
        metadata_key=pick("metadata_key") or None,
        tool_key=pick("tool_key") or None,
        apply_chat_template=bool(pick("apply_chat_template")),
        chat_template_kwargs=dict(kwargs) if kwargs is not None else chat_template_kwargs(config),
        max_prompt_len=_max_prompt_len(config),
        max_prompt_len_flag="--eval-max-prompt-len",
        multimodal_keys=multimodal_keys(config),
    )
    sampling_keys = ("max_response_len", "temperature", "top_p", "top_k", "stop", "stop_token_ids", "min_new_tokens")
    metadata = dict(pick("metadata_overrides") or {})
    if pick("rm_type"):
        metadata["rm_type"] = pick("rm_type")
    return EvalDataset(
        name=entry["name"],
        path=entry["path"],
        format=fmt,
        n_samples=pick("n_samples_per_eval_prompt"),
        sampling={key: pick(key) for key in sampling_keys},
        max_context_len=config.get("eval_max_context_len"),
        metadata=metadata,
        where=where,
        response_flag=source("max_response_len"),
    )


def _max_prompt_len(config: Config) -> int | None:
    """``--eval-max-prompt-len``, else one token less than ``--eval-max-context-len`` (room for a
    response), else the rollout's ``--rollout-max-prompt-len``."""
    if config.get("eval_max_prompt_len") is not None:
        return config.eval_max_prompt_len
    if config.get("eval_max_context_len") is not None:
        return config.eval_max_context_len - 1
    return config.get("rollout_max_prompt_len")


def eval_config_problems(config: Config) -> list[str]:
    """A bad ``--eval-config`` (the file and entry named), or one given with ``--eval-prompt-data``."""
    if not config.get("eval_config"):
        return []
    if config.sources.get("eval_prompt_data", "default") != "default" and not str(
        config.sources.get("eval_prompt_data")
    ).startswith("--eval-config"):
        return ["--eval-config and --eval-prompt-data both name evaluation datasets; give one of them"]
    try:
        eval_datasets(config)
    except EvalConfigError as exc:
        return [str(exc)]
    return []


def eval_prompt_data_from_config(config: Config) -> None:
    """slime's resolution: ``--eval-prompt-data`` becomes the NAME PATH pairs of ``--eval-config``
    (left as it is when the file cannot be used: `eval_config_problems` says why)."""
    if not config.get("eval_config") or config.sources.get("eval_prompt_data", "default") != "default":
        return
    try:
        datasets = eval_datasets(config)
    except EvalConfigError:
        return
    config.eval_prompt_data = [item for dataset in datasets for item in (dataset.name, dataset.path)]
    config.sources["eval_prompt_data"] = f"--eval-config {config.eval_config}"
