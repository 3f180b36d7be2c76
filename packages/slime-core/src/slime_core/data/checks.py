"""The prompt files, checked before any process starts, with file:line in every problem:
what a run would otherwise find while it loads its data (after Ray, the ranks and the
engines are up) or, worse, mid-training (an engine refusing an over-long prompt).

Two stages, both in ``slime run`` and ``slime run --dry-run``:

- `record_problems`, with the other config checks: every record of ``--prompt-data`` and of
  each evaluation dataset (``--eval-prompt-data``, ``--eval-config``) is read, with the
  dataset's own keys (bytes that are not UTF-8, invalid JSON, a missing prompt or label key,
  a label the reward function does not grade: `slime_core.data.labels`), and a file
  or slice without a record is refused. It imports nothing heavy: the quickstart's 2,500
  records take ~0.02 CPU-s (a config mistake: 0.18 CPU-s instead of 0.16).
- `prompt_length_problems`, once everything else passed (it imports transformers and
  tokenizes): each prompt measured as the engine will see it (after the chat template with
  ``--apply-chat-template``, with the tokenizer of ``--hf-checkpoint``). With
  ``--rollout-max-prompt-len`` longer prompts are dropped and counted, as slime does when it
  loads data; a prompt over the engine's budget (`slime_core.data.prompt_budget`) is an error.
  The datasets it loads are handed to the run (`PromptDataset.load`), so the run does not
  tokenize them again; what it costs is importing transformers (and torch) before Ray starts,
  which the run did anyway (torch before Ray, transformers in the tokenizer's thread): the
  quickstart's dry run took 2.7 CPU-s instead of 0.36 (median of 5 on a loaded 2-core machine).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from slime_core.data.eval_datasets import EvalConfigError, eval_datasets
from slime_core.data.labels import label_checker
from slime_core.data.prompt_budget import PromptBudget, prompt_budget
from slime_core.data.prompt_dataset import PromptDataset, PromptFormat, check_record
from slime_core.data.records import DataError, read_records
from slime_core.data.slicing import split_path_slice

if TYPE_CHECKING:
    from slime_core.config import Config


@dataclass(frozen=True)
class DataSpec:
    """One prompt file the run reads."""

    flag: str  # where it was given ("--prompt-data", "--eval-config FILE dataset 'NAME'")
    spec: str  # its path (``PATH@[a:b]`` for a slice)
    format: PromptFormat  # its record keys, chat template and prompt length limit
    evaluation: bool
    rm_type: str | None = None  # an evaluation dataset's own reward
    response: tuple[int, str] | None = None  # an evaluation dataset's own response limit, and where it is set


def data_specs(config: Config) -> list[DataSpec]:
    """Every prompt file the run reads: ``--prompt-data`` and each evaluation dataset."""
    specs = [DataSpec("--prompt-data", config.prompt_data, PromptFormat.from_config(config), False)]
    try:
        datasets = eval_datasets(config)
    except EvalConfigError:
        datasets = []  # reported by the config check
    specs += [
        DataSpec(d.where, d.path, d.format, True, d.metadata.get("rm_type"), _response(d.sampling, d.response_flag))
        for d in datasets
    ]
    return specs if config.get("prompt_data") else specs[1:]


def _response(sampling: dict, flag: str) -> tuple[int, str] | None:
    limit = sampling.get("max_response_len")
    return (int(limit), flag) if isinstance(limit, int) else None


def record_problems(config: Config, plugins) -> list[str]:
    """The first bad record of each prompt file, and each file or slice without a record."""
    problems = []
    for data in data_specs(config):
        flag, spec, fmt = data.flag, data.spec, data.format
        check_label = label_checker(config, plugins, fmt, data.rm_type)
        path, part = split_path_slice(spec)
        if not Path(path).is_file():
            continue  # reported by the config check
        try:
            records = list(read_records(path))
            selected = records[part]
            for where, record in selected:
                check_record(where, record, fmt)
                check_label(where, record)
        except DataError as exc:
            problems.append(str(exc))
            continue
        if not selected:
            held = "holds no record" if not records else f"selects none of the file's {len(records)} records"
            problems.append(
                f"{flag} {spec}: no prompts: the file {held}; give a file (or slice) with at least one "
                "JSON object per line"
            )
    return problems


def budget_problems(budgets: set[PromptBudget | None]) -> list[str]:
    """A response limit that leaves no room for any prompt in the engine's context."""
    return [
        f"{budget.response_flag} {budget.response} leaves no room for a prompt in the engine's context of "
        f"{budget.context} tokens ({budget.source}); lower it to at most {budget.context - 2}, or give the engines "
        "a longer context with --sglang-context-length"
        for budget in budgets
        if budget is not None and budget.tokens < 1
    ]


def prompt_length_problems(config: Config, plugins) -> tuple[list[str], list[str]]:
    """Problems (a response limit that leaves no room for a prompt, prompts over the engine's
    budget, files left without prompts) and one line per file on its prompts' lengths (for the
    dry run's report). Loads nothing when the run needs no tokenized prompt: no chat template,
    no ``--rollout-max-prompt-len`` and no engine."""
    budgets = [(data, prompt_budget(config, data.evaluation, plugins, data.response)) for data in data_specs(config)]
    no_room = budget_problems({budget for _, budget in budgets})
    tokenized = any(data.format.apply_chat_template or data.format.max_prompt_len or budget for data, budget in budgets)
    if no_room or not tokenized:
        return no_room, []
    from slime_core.tokenizer import load_tokenizer

    try:
        tokenizer = load_tokenizer(config.hf_checkpoint)
    except (OSError, ValueError) as exc:
        missing = f"no tokenizer at --hf-checkpoint {config.hf_checkpoint} ({exc})"
        if config.dry_run:  # e.g. a slime launch script's model path, on another machine
            return [], [f"prompt lengths not checked: {missing}"]
        return [f"{missing}; give a Hugging Face model directory with its tokenizer files"], []
    problems, notes = [], []
    for data, budget in budgets:
        try:
            dataset = PromptDataset.checked(data.spec, data.format, tokenizer)
        except DataError as exc:
            problems.append(str(exc))
            continue
        problems += over_budget(dataset, budget)
        notes.append(describe_lengths(dataset, budget))
    return problems, notes


def over_budget(dataset: PromptDataset, budget: PromptBudget | None) -> list[str]:
    """The first prompt of ``dataset`` longer than ``budget`` (file:line), and how many more."""
    if budget is None:
        return []
    over = [sample for sample in dataset.samples if len(sample.tokens) > budget.tokens]
    if not over:
        return []
    more = f" (and {len(over) - 1} more prompts in this file)" if len(over) > 1 else ""
    rendered = " after the chat template" if dataset.format.apply_chat_template else ""
    return [
        f"{over[0].metadata['source']}: the prompt has {len(over[0].tokens)} tokens{rendered}, more than the "
        f"engine takes with a whole response: {budget.why}{more}; shorten it, or drop such prompts when the "
        f"data is loaded with {dataset.format.max_prompt_len_flag} {budget.tokens}"
    ]


def describe_lengths(dataset: PromptDataset, budget: PromptBudget | None) -> str:
    """``FILE: N prompts of at most L tokens (budget ...), K dropped as longer than ...``."""
    longest = max((len(sample.tokens) for sample in dataset.samples), default=0)
    line = f"{dataset.path}: {len(dataset)} prompts of at most {longest} tokens"
    if budget is not None:
        line += f" (the engine takes {budget.why})"
    if dataset.dropped_too_long:
        line += (
            f"; {dataset.dropped_too_long} dropped as longer than {dataset.format.max_prompt_len} tokens "
            f"({dataset.format.max_prompt_len_flag})"
        )
    return line
