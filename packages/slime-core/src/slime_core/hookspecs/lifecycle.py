"""Lifecycle hooks: before/after pairs around each phase of the loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_core.hookspecs.marker import hookspec

if TYPE_CHECKING:
    from slime_core.config import Config

# --------------------------------------------------------------------------------------
# lifecycle: the run
# --------------------------------------------------------------------------------------


@hookspec
def slime_before_run(config: Config):
    """Called once after the config is resolved, before any Ray actor starts.

    :param config: the resolved, frozen ``Config``, with the run directory (``output_dir``). The
        parts started after this hook get a copy with the run's network too
        (``config.network``), which the later hooks are given.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_after_run(config: Config, status):
    """Called once when the run ends, after actors are shut down.

    :param config: the resolved ``Config``.
    :param status: ``"completed"``, ``"failed"`` or ``"interrupted"``.
    :return: nothing.

    Runs in the driver.
    """


# --------------------------------------------------------------------------------------
# lifecycle: rollout
# --------------------------------------------------------------------------------------


@hookspec
def slime_before_rollout(rollout_id, config: Config):
    """Called before generation of a rollout starts.

    :param rollout_id: index of the rollout (0-based, continues after a resume).
    :param config: the resolved ``Config``.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_after_rollout(rollout_id, groups, metrics):
    """Called after a rollout is generated, scored and filtered, before training on it.

    :param rollout_id: index of the rollout.
    :param groups: ``list[list[Sample]]``, one inner list per prompt group; plugins may
        read and annotate samples (metadata) but should not change their tokens.
    :param metrics: dict of rollout metrics; plugins may add keys.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_log_rollout(rollout_id, config: Config, groups, metrics, seconds):
    """Called before a rollout's metrics are logged, after ``slime_after_rollout`` and the
    stale-group drop: a plugin that logs rollouts its own way can leave out the default ones.

    :param rollout_id: index of the rollout.
    :param config: the resolved ``Config``.
    :param groups: ``list[list[Sample]]``, the groups that will be trained on.
    :param metrics: the rollout function's own metrics (``RolloutResult.metrics``, with
        ``perf/rollout_seconds``).
    :param seconds: how long the rollout took to generate and score.
    :return: True to leave out this rollout's default metrics (``metrics`` above and the
        sample statistics ``rollout/reward_mean``, ``rollout/response_length_mean``, ...);
        the loop's own counters, timings and train metrics are logged in any case.

    Runs in the driver.
    """


# --------------------------------------------------------------------------------------
# lifecycle: training
# --------------------------------------------------------------------------------------


@hookspec
def slime_before_train_step(rollout_id, step):
    """Called before each optimizer step on a rollout's data (``--num-steps-per-rollout``
    of them per rollout; the train ranks run one step between this hook and the next).

    :param rollout_id: index of the rollout being trained on.
    :param step: optimizer step index within the rollout (0..num_steps_per_rollout-1).
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_after_train_step(rollout_id, step, metrics):
    """Called after an optimizer step, with its metrics.

    :param rollout_id: index of the rollout being trained on.
    :param step: optimizer step index within the rollout.
    :param metrics: dict of train metrics (losses, KL, grad norm, ...); plugins may add keys.
    :return: nothing.

    Runs in the driver.
    """


# --------------------------------------------------------------------------------------
# lifecycle: weight update
# --------------------------------------------------------------------------------------


@hookspec
def slime_before_weight_update(rollout_id, version):
    """Called before new weights are pushed to the rollout engines.

    :param rollout_id: index of the rollout just trained on.
    :param version: the weight version about to be pushed.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_after_weight_update(rollout_id, version, metrics):
    """Called after every engine has the new weights.

    :param rollout_id: index of the rollout just trained on.
    :param version: the weight version now served.
    :param metrics: dict with the update's time and bytes; plugins may add keys.
    :return: nothing.

    Runs in the driver.
    """


# --------------------------------------------------------------------------------------
# lifecycle: evaluation
# --------------------------------------------------------------------------------------


@hookspec
def slime_before_eval(rollout_id):
    """Called before an evaluation rollout.

    :param rollout_id: index of the rollout after which evaluation runs.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_log_eval(rollout_id, config: Config, groups, metrics):
    """Called after an evaluation rollout, before ``slime_after_eval``: a plugin that logs
    evaluations its own way can read every scored sample and leave out the default metrics.

    :param rollout_id: index of the rollout after which evaluation ran (-1 before training).
    :param config: the resolved ``Config``.
    :param groups: dict of dataset name -> ``list[list[Sample]]`` (one inner list per prompt,
        ``--n-samples-per-eval-prompt`` each), as the eval function returned them in an
        ``EvalResult`` (the default eval function does); empty for one returning bare metrics.
    :param metrics: the eval function's metrics (``eval/<name>/...``).
    :return: True to leave out those metrics; ``time/eval`` is logged in any case.

    Runs in the driver.
    """


@hookspec
def slime_after_eval(rollout_id, metrics):
    """Called after an evaluation rollout, with its per-dataset scores.

    :param rollout_id: index of the rollout after which evaluation ran.
    :param metrics: dict with ``eval/<name>/...`` keys; plugins may add keys.
    :return: nothing.

    Runs in the driver.
    """


# --------------------------------------------------------------------------------------
# lifecycle: checkpoint
# --------------------------------------------------------------------------------------


@hookspec
def slime_before_save(rollout_id, path):
    """Called before a checkpoint is written.

    :param rollout_id: index of the last rollout the checkpoint contains.
    :param path: directory the checkpoint is written to.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_after_save(rollout_id, path):
    """Called after a checkpoint is completely written (and visible as complete).

    :param rollout_id: index of the last rollout the checkpoint contains.
    :param path: directory of the finished checkpoint; plugins may add files to it.
    :return: nothing.

    Runs in the driver.
    """
