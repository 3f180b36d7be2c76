"""slime's own resolution: the core options that follow from others, filled in once, before any
check runs, so that the checks see the final values and the config can be frozen after them.

`load_config` runs it after every plugin's ``slime_resolve_config`` (a plugin may set an option
these follow from); each step leaves a value it cannot derive unset, and the check of that option
(`slime_core.config.validate`, `slime_core.cli.run`) reports why.
"""

from __future__ import annotations

from pathlib import Path

from slime_core.config.config import Config
from slime_core.data.eval_datasets import eval_prompt_data_from_config


def resolve(config: Config) -> None:
    """Fill in the derived core options of ``config`` in place (before it is frozen)."""
    _batch_sizes(config)
    _prompt_len(config)
    eval_prompt_data_from_config(config)
    _rollout_buffer(config)
    _replay_trains_only(config)
    _fresh_load(config)
    _rollouts_from_epochs(config)
    _rollout_routing_replays(config)


def _batch_sizes(config: Config) -> None:
    """A missing global_batch_size or num_steps_per_rollout, from slime's constraint
    rollout_batch_size × n_samples_per_prompt = global_batch_size × num_steps_per_rollout."""
    sizes = ("rollout_batch_size", "n_samples_per_prompt", "global_batch_size", "num_steps_per_rollout")
    if config.get("rollout_batch_size") is None or any(
        config.get(key) is not None and config.get(key) <= 0 for key in sizes
    ):
        return
    total = config.rollout_batch_size * config.n_samples_per_prompt
    gb, steps = config.global_batch_size, config.num_steps_per_rollout
    if gb is None and total % (steps or 1) == 0:
        config.global_batch_size, config.num_steps_per_rollout = total // (steps or 1), steps or 1
    elif gb is not None and steps is None and total % gb == 0:
        config.num_steps_per_rollout = total // gb


def _prompt_len(config: Config) -> None:
    """``--rollout-max-context-len`` as slime reads it: the prompt limit defaults to one token less
    (so every kept prompt leaves room for a trained token)."""
    context = config.get("rollout_max_context_len")
    if context is not None and context >= 2 and config.get("rollout_max_prompt_len") is None:
        config.rollout_max_prompt_len = context - 1
        config.sources["rollout_max_prompt_len"] = f"--rollout-max-context-len {context} minus 1"


def _rollout_buffer(config: Config) -> None:
    """``--rollout-buffer-url`` trains on the buffer's trajectories (the ``rollout_buffer``
    rollout function), unless another rollout function was chosen (which may read the URL)."""
    if config.get("rollout_buffer_url") and config.sources.get("rollout_function", "default") == "default":
        config.rollout_function = "rollout_buffer"
        config.sources["rollout_function"] = f"--rollout-buffer-url {config.rollout_buffer_url}"


def _rollout_routing_replays(config: Config) -> None:
    """R3 replays the engine's routing in the updates as R2 replays the trainer's (as in slime)."""
    if config.get("use_rollout_routing_replay"):
        config.use_routing_replay = True
        config.sources["use_routing_replay"] = "--use-rollout-routing-replay"


def _replay_trains_only(config: Config) -> None:
    """Replayed rollouts (``--load-debug-rollout-data``) are only trained on."""
    if config.get("load_debug_rollout_data"):
        config.debug_train_only = True


def _fresh_load(config: Config) -> None:
    """``--load X --save X`` with no X yet starts fresh, as in slime (the usual launch script
    resumes from the run's own checkpoints once there are some): ``--load`` is dropped."""
    load, save = config.get("load"), config.get("save")
    if load and save and not Path(load).exists() and Path(load).resolve() == Path(save).resolve():
        config.load = None


def _rollouts_from_epochs(config: Config) -> None:
    """slime's ``--num-epoch``: without ``--num-rollout``, run num_epoch × (prompts //
    rollout_batch_size) rollouts; the prompts are counted in --prompt-data (its slice). An
    unreadable or empty file leaves it unset (the data checks report the file)."""
    if config.get("num_rollout") or not config.get("num_epoch") or not config.get("rollout_batch_size"):
        return
    prompts = prompt_count(config.get("prompt_data"))
    if prompts:
        config.num_rollout = config.num_epoch * (prompts // config.rollout_batch_size)
        config.sources["num_rollout"] = f"--num-epoch {config.num_epoch} × ({prompts} prompts // --rollout-batch-size)"


def prompt_count(spec: str | None) -> int:
    """The number of records in ``--prompt-data`` (``PATH`` or ``PATH@[a:b]``); 0 when it cannot be read."""
    if not spec:
        return 0
    from slime_core.data.records import DataError, read_records
    from slime_core.data.slicing import split_path_slice

    path, part = split_path_slice(spec)
    try:
        return len(range(*part.indices(sum(1 for _ in read_records(path)))))
    except DataError:
        return 0
