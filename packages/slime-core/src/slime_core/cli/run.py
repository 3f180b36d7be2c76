"""``slime run [CONFIG.yaml] [--flags]``: resolve the config, then run (or describe) the loop."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from slime_core.components import resolve_components
from slime_core.config import ConfigError, OptionSet, load_config
from slime_core.config.accepted_flags import no_effect_notes
from slime_core.config.no_effect import no_effect_warnings
from slime_core.config.resolve import prompt_count
from slime_core.data.checks import prompt_length_problems, record_problems
from slime_core.faults.run_error import RunError
from slime_core.loop.trackers import TrackerError, tracker_problems
from slime_core.plugins.custom_paths import apply_custom_paths
from slime_core.preflight import preflight_problems

if TYPE_CHECKING:
    from slime_core.config import Config


def run_command(argv: list[str], plugins) -> int:
    argv = [token for arg in argv for token in (["--train-mode", "async"] if arg == "--async" else [arg])]
    options = OptionSet()
    plugins.add_options(options)
    if "-h" in argv or "--help" in argv or "--help-all" in argv:
        options.help_parser("slime run", everything="--help-all" in argv).print_help()
        return 0
    try:
        config = load_config(argv, options, plugins, checks=lambda c: run_problems(c, plugins))
        data_notes = checked_prompts(config, plugins)
    except ConfigError as exc:
        print(f"slime run: {exc}", file=sys.stderr)
        return 2
    for warning in no_effect_warnings(config, options) + no_effect_notes(config):
        print(f"slime run: warning: {warning}", file=sys.stderr)
    if config.dry_run:
        print(describe_run(config, plugins, *resolve_components(config, plugins), data_notes=data_notes))
        return 0
    from slime_core.checkpoint.directory import CheckpointError
    from slime_core.loop import run

    try:
        return run(config, plugins)
    except TrackerError as exc:  # e.g. an online W&B run without a login
        print(f"slime run: {exc}", file=sys.stderr)
        return 2
    except CheckpointError as exc:  # a save that failed, a checkpoint refused (raised in a train rank: Ray's wrapper)
        print(f"slime run: {getattr(exc, 'cause', None) or exc}", file=sys.stderr)
        return 1
    except RunError as exc:  # a NaN reward, a lost Ray cluster, a failing engine: the message names it and the fix
        print(f"slime run: {exc}", file=sys.stderr)
        return 1


def run_problems(config: Config, plugins) -> list[str]:
    """Components that are not installed and settings the loop cannot run with; a dry run
    reports the components instead of failing on them, and fails on the data as a run would."""
    apply_custom_paths(config, plugins)
    problems = epoch_problems(config) + group_problems(config, plugins) + record_problems(config, plugins)
    if config.dry_run:
        return problems
    return (
        problems
        + resolve_components(config, plugins)[1]
        + loop_problems(config, plugins)
        + tracker_problems(config)
        + preflight_problems(config, trains=not config.debug_rollout_only)
    )


def checked_prompts(config: Config, plugins) -> list[str]:
    """Once every other check passed: the prompts measured as the engine will see them
    (`slime_core.data.checks.prompt_length_problems`, which imports transformers and
    tokenizes); raises `ConfigError` for the problems, returns a line per file for the dry run."""
    problems, notes = prompt_length_problems(config, plugins)
    if problems:
        raise ConfigError(problems)
    return notes


def epoch_problems(config: Config) -> list[str]:
    """slime's ``--num-epoch`` that makes no rollout: fewer prompts in --prompt-data than one
    rollout batch (the count of rollouts is resolved by `slime_core.config.resolve`)."""
    if config.num_rollout != 0 or not config.sources.get("num_rollout", "").startswith("--num-epoch"):
        return []
    from slime_core.data.slicing import split_path_slice

    path, _ = split_path_slice(config.prompt_data)
    return [
        f"--num-epoch {config.num_epoch}: {path} holds {prompt_count(config.prompt_data)} prompts, fewer than one "
        f"rollout batch (--rollout-batch-size {config.rollout_batch_size}); lower the batch size or give --num-rollout"
    ]


def group_problems(config: Config, plugins) -> list[str]:
    """The driver gives each model replica (a data-parallel rank) whole prompt groups, at least
    one (`slime_core.rollout_batch.dp_rank_indices`): fewer groups per rollout than replicas
    would stop the first train step. A replica is one rank, or the ranks the train backend
    says form one (``slime_ranks_per_replica``: Megatron's tensor × pipeline × context ranks)."""
    from slime_core.rollout_batch import groups_per_rank_problem

    if not config.get("rollout_batch_size") or config.get("debug_rollout_only"):
        return []
    ranks = config.actor_num_nodes * config.actor_num_gpus_per_node
    problem = groups_per_rank_problem(config.rollout_batch_size, max(1, ranks // plugins.ranks_per_replica(config)))
    return [f"--rollout-batch-size {config.rollout_batch_size}: {problem}"] if problem else []


def loop_problems(config: Config, plugins) -> list[str]:
    """What stops the loop before any process starts (beyond each option's own checks)."""
    problems = part_problems(config, plugins)
    if not config.num_rollout:
        problems.append("--num-rollout is required: how many rollouts (generate + train iterations) to run")
    if config.train_mode == "async" and config.colocate:
        problems.append(
            "--train-mode async overlaps generation with training, which --colocate cannot "
            "(they take turns on the same devices); drop one of the two"
        )
    if config.eval_interval and not config.eval_prompt_data:
        problems.append("--eval-interval needs --eval-prompt-data NAME PATH ... to evaluate on")
    return problems


def part_problems(config: Config, plugins) -> list[str]:
    """Parts the chosen backends cannot provide: a PPO critic, an in-process run of several ranks."""
    problems = []
    backend = config.train_backend
    if (
        config.advantage_estimator == "ppo"
        and backend in plugins.registry("train_backends")
        and backend not in plugins.registry("critics")
    ):
        provided = ", ".join(plugins.registry("critics").names()) or "none installed"
        problems.append(
            f"--advantage-estimator ppo needs a critic, and train backend '{backend}' provides none "
            f"(train backends with a critic: {provided}); use one of those, or another estimator"
        )
    ranks = config.actor_num_nodes * config.actor_num_gpus_per_node
    if config.actor_runtime == "inprocess" and ranks != 1:
        problems.append(
            f"--actor-runtime inprocess runs one train rank in this process, and {ranks} were asked for "
            "(--actor-num-nodes × --actor-num-gpus-per-node); set both to 1, or use --actor-runtime ray"
        )
    return problems


def describe_run(
    config: Config, plugins, components: list[dict], missing: list[str], data_notes: Sequence[str] = ()
) -> str:
    """The dry-run report: resolved config, loaded plugins, the selected components, and the
    prompt files' lengths as the engine will see them."""
    lines = ["# resolved config", config.to_yaml().rstrip(), "", "# plugins"]
    lines += [f"- {info.name}: {info.label}" for info in plugins.info.values()]
    lines += ["", "# components (option: name -> provider)"]
    for row in components:
        provider = f"plugin '{row['plugin']}' ({row['distribution']})" if row["plugin"] else "NOT INSTALLED"
        lines.append(f"- {row['option']}: {row['name']} -> {provider}")
    if data_notes:
        lines += ["", "# prompts (tokens as the engine sees them)"] + [f"- {note}" for note in data_notes]
    notes = no_effect_notes(config)
    if notes:
        lines += ["", "# accepted, no effect here (flags of slime's and Megatron-LM's launch scripts)"]
        lines += [f"- {note}" for note in notes]
    if missing:
        lines += ["", "# a real run would stop here:"] + [f"- {error}" for error in missing]
    return "\n".join(lines)
