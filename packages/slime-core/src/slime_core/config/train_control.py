"""Options that steer how the trainer trains, with THUDM slime's names and meanings, and the
profilers around the train phases (slime's ``--profile-target`` with Megatron-LM's profiler flags).

- ``--ref-update-interval N``: after every N-th rollout the actor trained on, the reference
  model becomes a copy of the actor (slime: ``(rollout_id + 1) % N == 0``);
- ``--reset-optimizer-states``: the optimizer's moments and step counts are zeroed before each
  rollout's training (the learning-rate schedule goes on), for the actor and a PPO critic;
- ``--num-critic-only-steps N``: with a PPO critic, the first N rollouts train the critic alone;
- ``--only-train-params-name-list`` / ``--freeze-params-name-list``: Python regexes matched with
  ``re.search`` against the backend's parameter names (`slime_core.rank.trainable`);
- profiling (`slime_core.rank.profiler`): ``--use-pytorch-profiler`` traces each phase of
  ``--profile-target``; ``--record-memory-history`` records the allocator's history
  (``--memory-recorder``) and dumps a snapshot after ``--memory-snapshot-num-steps`` rollouts.

`problems` is the config check of these options (called by `slime_core.config.validate`).
"""

from __future__ import annotations

import importlib.util
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slime_core.config.config import Config
    from slime_core.config.options import OptionSet

#: slime's phases to profile: the whole run stepped once per rollout, a rollout's training
#: micro-batches, and the micro-batches of each log-prob pass
PROFILE_TARGETS = ("train_overall", "train_actor", "train_log_probs")
_WINDOW = "it sets the window of --use-pytorch-profiler's traces"
_OVERALL = "it acts on the train_overall profile target (--profile-target train_overall)"


def train_control_options(o: OptionSet) -> None:
    g = "training control"
    o.add(
        "--ref-update-interval",
        type=int,
        default=None,
        help="replace the reference model by a copy of the actor after every N-th rollout it trained on",
        group=g,
        acts_when=lambda c: c.use_kl_loss or c.kl_coef,
        no_effect="there is no reference model without --use-kl-loss or --kl-coef",
    )
    o.add(
        "--reset-optimizer-states",
        type=bool,
        default=False,
        help="zero the optimizer's moments and step counts before each rollout's training (actor and critic)",
        group=g,
    )
    o.add(
        "--num-critic-only-steps",
        type=int,
        default=0,
        help="PPO: the first N rollouts train only the critic (the actor's weights stay as loaded)",
        group=g,
        acts_when=lambda c: c.advantage_estimator == "ppo",
        no_effect="only PPO (--advantage-estimator ppo) has a critic to train alone",
    )
    o.add(
        "--only-train-params-name-list",
        nargs="+",
        default=None,
        help="regexes (re.search) of the parameter names to train; every other parameter is frozen",
        group=g,
    )
    o.add(
        "--freeze-params-name-list",
        nargs="+",
        default=None,
        help="regexes (re.search) of the parameter names to freeze (applied after --only-train-params-name-list)",
        group=g,
    )


def profiling_options(o: OptionSet) -> None:
    g = "profiling"
    profiled = lambda c: c.use_pytorch_profiler  # noqa: E731
    o.add(
        "--use-pytorch-profiler",
        type=bool,
        default=False,
        help="torch.profiler traces of each --profile-target phase on every train rank, in <output-dir>/tensorboard "
        "(<target>_rank_<r>.*.pt.trace.json.gz)",
        group=g,
    )
    o.add(
        "--profile-target",
        nargs="+",
        default=["train_overall"],
        choices=list(PROFILE_TARGETS),
        help="train_overall (stepped once per rollout), train_actor (a rollout's training micro-batches), "
        "train_log_probs (each log-prob pass's micro-batches)",
        group=g,
        acts_when=lambda c: c.use_pytorch_profiler or c.record_memory_history,
        no_effect="it picks what --use-pytorch-profiler or --record-memory-history records",
    )
    for flag, default, what in (
        ("--profile-step-start", 10, "first profiler step recorded"),
        ("--profile-step-end", 12, "profiler step at which recording stops"),
    ):
        o.add(flag, type=int, default=default, help=what, group=g, acts_when=profiled, no_effect=_WINDOW)
    memory = lambda c: c.record_memory_history and "train_overall" in c.profile_target  # noqa: E731
    o.add(
        "--record-memory-history",
        type=bool,
        default=False,
        help="record the train ranks' memory allocations from the start (--memory-recorder) and dump a snapshot "
        "after --memory-snapshot-num-steps rollouts; torch: CUDA allocations only, memray: host memory",
        group=g,
        acts_when=lambda c: "train_overall" in c.profile_target,
        no_effect=_OVERALL,
    )
    o.add("--memory-recorder", default="torch", choices=["torch", "memray"], help="torch or memray", group=g)
    o.add("--memory-snapshot-dir", default=".", help="directory of the memory snapshots", group=g)
    o.add("--memory-snapshot-path", default="snapshot.pickle", help="file name suffix of a snapshot", group=g)
    o.add(
        "--memory-snapshot-num-steps",
        type=int,
        default=None,
        help="dump the memory snapshot after this many rollouts (rollout id N-1); memray needs it",
        group=g,
    )
    for key in ("memory_recorder", "memory_snapshot_dir", "memory_snapshot_path", "memory_snapshot_num_steps"):
        o.add_rule(key, memory, "it acts with --record-memory-history on the train_overall --profile-target")


def problems(config: Config) -> list[str]:
    """Regexes that do not compile, a memray recorder that is not installed or has no step to stop
    at, profiler phases that overlap, an empty profiler window."""
    errors = []
    for key in ("only_train_params_name_list", "freeze_params_name_list"):
        for pattern in config.get(key) or ():
            try:
                re.compile(pattern)
            except re.error as exc:
                errors.append(f"--{key.replace('_', '-')}: {pattern!r} is not a Python regex ({exc}); fix the pattern")
    if config.get("record_memory_history") and config.get("memory_recorder") == "memray":
        if importlib.util.find_spec("memray") is None:
            errors.append(
                "--memory-recorder memray needs the memray package, which is not installed: "
                "pip install 'slime-core[memray]'"
            )
        if config.get("memory_snapshot_num_steps") is None:
            errors.append("--memory-recorder memray writes its file when it stops: set --memory-snapshot-num-steps N")
    targets = set(config.get("profile_target") or ())
    if config.get("use_pytorch_profiler") and "train_overall" in targets and targets - {"train_overall"}:
        errors.append(
            "--profile-target train_overall spans the other phases, and torch runs one profiler at a time: "
            "profile train_overall alone, or train_actor and/or train_log_probs"
        )
    if config.get("use_pytorch_profiler") and config.profile_step_end <= config.profile_step_start:
        errors.append(
            f"--profile-step-end ({config.profile_step_end}) must be above --profile-step-start "
            f"({config.profile_step_start}): the profiler records the steps in between"
        )
    return errors
