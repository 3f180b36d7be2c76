"""The loop of ``slime run``: rollout → rewards → train → update weights → evaluate / save.

`run` is the whole recipe; `Run` holds the parts (`slime_core.loop.parts.Parts`: train
ranks, engines, router, rollout manager, weight sync) and one method per phase, each a few
lines. Synchronous mode does the phases in turn. Asynchronous mode (``--train-mode async``) generates rollout k+1
while it
trains on rollout k, pushes weights every ``--update-weights-interval`` rollouts, and drops
groups older than ``--max-staleness`` weight versions (counted).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from slime_core.checkpoint.directory import (
    CheckpointError,
    latest_checkpoint,
    prune,
    rollout_state_path,
    write_atomically,
)
from slime_core.faults.nonfinite import SkippedSteps
from slime_core.faults.run_error import RunError
from slime_core.faults.run_fault import stoppable, stopping_fault
from slime_core.loop.progress import Progress
from slime_core.loop.run_dir import RunDir
from slime_core.loop.runtime import ray_runtime
from slime_core.rollout.debug_data import save_rollout
from slime_core.rollout.manager import ROLLOUT_SECONDS
from slime_core.rollout.metrics import drop_stale_groups, rollout_metrics, staleness
from slime_core.rollout.sample_filters import SampleFilters
from slime_core.rollout_batch import train_batch

if TYPE_CHECKING:
    from slime_core.config import Config
    from slime_core.loop.fault_tolerance import EngineMonitor
    from slime_core.loop.parts import Parts
    from slime_core.plugins import Plugins
    from slime_core.train_backend import TrainGroup


def run(config: Config, plugins: Plugins) -> int:
    """Run the loop to ``--num-rollout``; 0 when it finished. Ctrl-C or SIGTERM stop it
    cleanly: every part (engines, router, train ranks, Ray) is shut down on the way out, and
    the run directory says ``interrupted`` (the run can be resumed from its last checkpoint);
    a fault that a watcher finds (the Ray cluster lost, an engine failing) stops it with that
    `slime_core.faults.run_fault.RunFault` (``failed``)."""
    run_dir = RunDir.create(config, plugins)
    config = run_dir.config  # with the run directory
    run_dir.log(f"slime run: writing to {run_dir.path}")
    plugins.before_run(config)
    _import_torch_before_ray()
    status = "failed"
    try:
        with stoppable(), ray_runtime(config), _sigterm_as_interrupt(), Run(config, plugins, run_dir) as loop:
            loop.train_async() if config.train_mode == "async" else loop.train_sync()
        status = "completed"
    except BaseException as exc:
        fault = stopping_fault()  # a watcher stopped the run (Ray lost, an engine failing): its message says why
        if fault is not None:
            run_dir.log_error(f"slime run: {fault}")
            raise fault from (None if isinstance(exc, KeyboardInterrupt) else exc)
        if isinstance(exc, KeyboardInterrupt):
            status = "interrupted"
        elif isinstance(exc, RunError):  # `slime run` prints it; slime.log keeps it with the run
            run_dir.log_error(f"slime run: {exc}")
        raise
    finally:
        run_dir.close(status)
        plugins.after_run(config, status)
    return 0


def _import_torch_before_ray() -> None:
    """Import torch now, which the driver needs for its tokenizer (transformers imports it):
    before Ray starts, one of two cores is idle; from then to the first rollout the train ranks
    and engines keep every core busy, and importing it there made start-up ~0.5-1 s slower
    (benchmarks/startup.py). The config checks before this point import no torch, so a config
    mistake is answered at once."""
    import torch  # noqa: F401


@contextmanager
def _sigterm_as_interrupt():
    """SIGTERM (a scheduler stopping the job) unwinds like Ctrl-C, so the parts are stopped.
    Installed after `ray.init`, which sets a SIGTERM handler of its own that aborts."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = (
        signal.signal(signal.SIGTERM, interrupt) if threading.current_thread() is threading.main_thread() else None
    )
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class Run:
    """The parts of a running loop and its phases; a context manager that starts the parts
    in order and stops them in reverse."""

    parts: Parts  # started by __enter__
    start: int  # the first rollout this run makes
    version: int  # the trainer's weight version
    progress: Progress

    def __init__(self, config: Config, plugins: Plugins, run_dir: RunDir):
        self.config, self.plugins, self.run_dir = config, plugins, run_dir
        self.sample_filters = SampleFilters.from_config(config, plugins)
        self.monitor: EngineMonitor | None = None  # when the run has engines
        self.skipped_steps = SkippedSteps(
            config.max_consecutive_skipped_steps if config.check_for_nan_in_loss_and_grad else None
        )
        self.source_states: dict[int, dict] = {}  # the data source as it was before each rollout started
        self._stack = ExitStack()

    # ---------------------------------------------------------------- the two modes

    def train_sync(self) -> None:
        self.evaluate_before_training()
        for rollout_id in range(self.start, self.config.num_rollout):
            self.parts.colocation.for_rollout()
            self.run_dir.mark("first rollout submitted")
            result, seconds = _timed(self.submit(rollout_id).result)
            self.run_dir.mark("first rollout generated")
            metrics = self.train(rollout_id, result, {"time/rollout": seconds})
            metrics.update(self.update_weights(rollout_id))
            self.finish(rollout_id, metrics)

    def train_async(self) -> None:
        self.evaluate_before_training()
        self.run_dir.mark("first rollout submitted")
        pending = self.submit(self.start)
        for rollout_id in range(self.start, self.config.num_rollout):
            result, seconds = _timed(pending.result)
            self.run_dir.mark("first rollout generated")
            if rollout_id + 1 < self.config.num_rollout:
                pending = self.submit(rollout_id + 1)  # generated while this one trains
            metrics = self.train(rollout_id, result, {"time/wait_rollout": seconds})
            if (rollout_id + 1) % self.config.update_weights_interval == 0:
                metrics.update(self.update_weights(rollout_id))
            self.finish(rollout_id, metrics)

    # ---------------------------------------------------------------- phases

    def submit(self, rollout_id: int):
        self.snapshot_source(rollout_id)
        self.plugins.before_rollout(rollout_id, self.config)
        return self.parts.rollouts.submit(rollout_id)

    def snapshot_source(self, rollout_id: int) -> None:
        self.source_states[rollout_id] = self.parts.rollouts.state_dict()
        self.source_states.pop(rollout_id - 2, None)

    def train(self, rollout_id: int, result, timings: dict[str, float]) -> dict[str, float]:
        """Rewards and batch from the rollout's groups, then the optimizer steps."""
        self.plugins.after_rollout(rollout_id, result.groups, result.metrics)
        if self.config.dump_rollouts:
            self.run_dir.dump_rollout(rollout_id, result.groups)
        if self.config.save_debug_rollout_data:
            save_rollout(self.config.save_debug_rollout_data, rollout_id, result)
        groups, dropped = drop_stale_groups(result.groups, self.version, self.config.max_staleness)
        filtered = self.sample_filters.apply(groups)  # before the batch: it zeroes loss masks
        batch = train_batch(in_prompt_order(groups), self.config, self.plugins)
        metrics = {
            **self.rollout_log(rollout_id, result, groups, batch),
            **timings,
            **filtered,
            **self.parts.rollouts.reward_metrics(),
            "rollout/stale_groups_dropped": float(dropped),
            "rollout/staleness_max": float(max((staleness(g, self.version) for g in groups), default=0)),
        }
        trainer, critic, weights = self.parts.trainer, self.parts.critic, self.parts.weights
        if len(batch) == 0 or trainer is None:  # nothing to train on, or --debug-rollout-only
            return metrics
        self.parts.colocation.for_training()
        start = time.perf_counter()
        if critic is not None:
            batch.values = critic.compute_values(batch)
            metrics.update({f"critic/{k}": v for k, v in critic.train_critic(rollout_id, batch).items()})
        train: dict[str, float] = {}
        with weights.lock if weights else nullcontext():  # an engine replacement reads them
            if self.actor_trains(rollout_id):
                train = trainer.train(rollout_id, batch, on_step=lambda step: self.step_hooks(rollout_id, step))
                self.version += 1
        seconds = time.perf_counter() - start
        tokens = sum(len(t) for t in batch.tokens)
        metrics.update({f"train/{k}": v for k, v in train.items()})
        metrics.update(self.skipped_steps.metrics())
        metrics.update(
            {
                "time/train": seconds,
                "perf/train_tokens_per_second": tokens / max(seconds, 1e-9),
                "perf/tokens": float(tokens),
                "weight_version": float(self.version),
            }
        )
        return metrics

    def actor_trains(self, rollout_id: int) -> bool:
        """Whether the actor trains on rollout ``rollout_id``: not in a PPO run's first
        ``--num-critic-only-steps`` rollouts, which train the critic alone (as slime's loop)."""
        return self.parts.critic is None or rollout_id >= self.config.num_critic_only_steps

    def rollout_log(self, rollout_id: int, result, groups, batch) -> dict[str, float]:
        """The rollout's default metrics (its own and the samples' statistics), unless a
        ``slime_log_rollout`` plugin leaves them out."""
        seconds = result.metrics.get(ROLLOUT_SECONDS, 0.0)
        if self.plugins.log_rollout(rollout_id, self.config, groups, result.metrics, seconds):
            return {}
        category = self.config.get("log_reward_category")
        return {**result.metrics, **rollout_metrics(groups, self.config.reward_key, batch, category)}

    @contextmanager
    def step_hooks(self, rollout_id: int, step: int):
        """``slime_before/after_train_step`` around optimizer step ``step``; the body fills
        the dict it is given with the step's metrics."""
        self.plugins.before_train_step(rollout_id, step)
        metrics: dict[str, float] = {}
        yield metrics
        self.plugins.after_train_step(rollout_id, step, metrics)
        self.skipped_steps.record(rollout_id, step, metrics)  # stops the run after too many in a row

    def update_weights(self, rollout_id: int) -> dict[str, float]:
        weights = self.parts.weights
        if weights is None:
            return {}
        self.parts.colocation.for_rollout()
        self.plugins.before_weight_update(rollout_id, self.version)
        push = lambda: weights.push(self.version)  # noqa: E731
        monitor = self.monitor if self.config.use_fault_tolerance else None
        metrics = monitor.after_replacements(push) if monitor is not None else push()
        metrics["time/weight_update"] = metrics["weight_update/seconds"]
        if self.config.check_weight_update_equal:
            from slime_core.loop.weight_check import max_logprob_diff

            metrics["weight_update/max_logprob_diff"] = max_logprob_diff(self.parts, self.config, self.version)
        self.plugins.after_weight_update(rollout_id, self.version, metrics)
        return metrics

    def finish(self, rollout_id: int, metrics: dict[str, float]) -> None:
        """Evaluate and save when due, then log the rollout's metrics and progress line."""
        if self.eval_due(rollout_id):
            metrics.update(self.evaluate(rollout_id))
        if self.save_due(rollout_id):
            metrics["time/save"] = _timed(self.save, rollout_id)[1]
        if self.parts.router is not None:
            metrics.update(self.parts.router.metrics())  # e.g. slime-router's `metrics` middleware
        if self.config.use_fault_tolerance and self.monitor is not None:  # none without engines
            metrics.update(self.monitor.metrics())
        step = sum(v for k, v in metrics.items() if k.startswith("time/"))
        metrics["perf/step_seconds"] = step
        metrics["perf/tokens_per_second"] = metrics.get("perf/tokens", 0.0) / max(step, 1e-9)
        self.run_dir.log_metrics(rollout_id, metrics)
        self.run_dir.log(self.progress.line(rollout_id, metrics))

    def evaluate_before_training(self) -> None:
        """The starting point of the eval curves, logged as rollout ``start - 1`` (not with
        ``--skip-eval-before-train``)."""
        skip = self.config.get("skip_eval_before_train")
        if self.parts.rollouts.eval_datasets and self.config.eval_interval and self.start == 0 and not skip:
            metrics = self.evaluate(-1)
            self.run_dir.log_metrics(-1, metrics)
            self.run_dir.log(
                "[before training]  "
                + "  ".join(f"{k[5:]} {v:.3f}" for k, v in metrics.items() if k.endswith("/reward_mean"))
            )

    def evaluate(self, rollout_id: int) -> dict[str, float]:
        self.parts.colocation.for_rollout()
        self.plugins.before_eval(rollout_id)
        start = time.perf_counter()
        from slime_core.rollout.manager import RolloutManager

        rollouts = self.parts.rollouts
        assert isinstance(rollouts, RolloutManager)  # eval_due: replayed rollouts have no eval datasets
        result = rollouts.evaluate()
        skip = self.plugins.log_eval(rollout_id, self.config, result.groups, result.metrics)
        metrics = {} if skip else result.metrics
        metrics["time/eval"] = time.perf_counter() - start
        self.plugins.after_eval(rollout_id, metrics)
        return metrics

    def save(self, rollout_id: int) -> None:
        """Every role's checkpoint of ``rollout_id`` (`slime_core.checkpoint.directory`): the rollout
        state first, then the critic's, then the policy's, whose pointer file, written last,
        makes the set the latest; then ``--save-retain-count``'s pruning. Weights that are not
        finite are refused before anything is written; a save that fails (a full disk) stops the
        run with a `CheckpointError` naming the checkpoint left intact."""
        trainer = self.parts.trainer
        assert trainer is not None  # save_due: a run without a trainer saves nothing
        trainer.check_finite_weights(f"save the checkpoint of rollout {rollout_id}")
        if self.parts.critic is not None:
            self.parts.critic.check_finite_weights(f"save the critic's checkpoint of rollout {rollout_id}")
        try:
            self._save_roles(rollout_id, trainer)
        except Exception as exc:  # noqa: BLE001 - any failure of a save ends the run the same way
            raise _save_failed(self.config.save, rollout_id, exc) from exc
        if self.config.save_retain_count:
            self._prune()

    def _save_roles(self, rollout_id: int, trainer: TrainGroup) -> None:
        path = rollout_state_path(self.config.save, rollout_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = self.source_states.get(rollout_id + 1) or self.parts.rollouts.state_dict()
        write_atomically(path, json.dumps({"rollout_id": rollout_id, "data_source": state}))
        self.plugins.before_save(rollout_id, self.config.save)
        if self.parts.critic is not None:
            self.parts.critic.save(rollout_id)
        trainer.save(rollout_id)
        self.plugins.after_save(rollout_id, self.config.save)

    def _prune(self) -> None:
        """Keep the newest ``--save-retain-count`` checkpoints, and the one this run resumed from."""
        resumed = self.config.get("load") and Path(self.config.load).resolve() == Path(self.config.save).resolve()
        try:
            deleted = prune(self.config.save, self.config.save_retain_count, self.start - 1 if resumed else None)
        except OSError as exc:
            self.run_dir.log(f"slime run: warning: --save-retain-count could not delete an old checkpoint: {exc}")
            return
        if deleted:
            self.run_dir.log(
                f"--save-retain-count {self.config.save_retain_count}: deleted the checkpoints of "
                f"rollouts {', '.join(map(str, deleted))} under {self.config.save}"
            )

    # ---------------------------------------------------------------- helpers

    def eval_due(self, rollout_id: int) -> bool:
        interval = self.config.eval_interval
        last = rollout_id + 1 == self.config.num_rollout
        return bool(self.parts.rollouts.eval_datasets) and bool(interval) and ((rollout_id + 1) % interval == 0 or last)

    def save_due(self, rollout_id: int) -> bool:
        interval = self.config.save_interval
        return (
            bool(self.config.save)
            and bool(interval)
            and self.parts.trainer is not None
            and ((rollout_id + 1) % interval == 0 or rollout_id + 1 == self.config.num_rollout)
        )

    # ---------------------------------------------------------------- start and stop

    def __enter__(self) -> Run:
        from slime_core.loop.parts import start_parts

        try:
            self.parts = start_parts(self.config, self.plugins, self.run_dir, self._stack)
            self.config = self.parts.config  # with the run's network, which the parts reach each other by
            self.start, self.version = self.parts.start, self.parts.version
            if self.parts.engines is not None:
                self.monitor = self._stack.enter_context(self._monitored())
        except BaseException:
            self._stack.close()
            raise
        self.progress = Progress(
            self.start,
            self.config.num_rollout,
            show_reward=self.config.loss_type != "sft_loss",
            show_loss=self.parts.trainer is not None,
        )
        return self

    def __exit__(self, *exc_info) -> None:
        self._stack.close()

    @contextmanager
    def _monitored(self):
        """The monitor over the run's engines (replacing failed ones with --use-fault-tolerance,
        else stopping the run), stopped before them; a request an engine failed waits for its check."""
        from slime_core.loop.fault_tolerance import EngineMonitor
        from slime_core.loop.parts import placement_record

        parts = self.parts
        monitor = EngineMonitor(
            self.config,
            parts.rollouts.engine_control,
            parts.router,
            parts.weights,
            parts.colocation,
            lambda: self.version,
            self.run_dir.log,
            lambda: self.run_dir.write_placement(placement_record(parts.placement, parts.router)),
        )
        monitor.start()
        parts.rollouts.watch_engine_faults(monitor.replaced_since_now)
        try:
            yield monitor
        finally:
            monitor.stop()


def in_prompt_order(groups) -> list:
    """The samples of ``groups`` by prompt (group index), then sample index: the order in which
    groups finished generating varies from run to run, and the batch is split into optimizer
    steps and ranks by position, so this order is what makes a rerun or a resume train on the
    same slices."""
    ordered = sorted(groups, key=lambda group: min(sample.group_index for sample in group))
    return [sample for group in ordered for sample in sorted(group, key=lambda sample: sample.index)]


def _timed(fn, *args):
    """``fn(*args)`` and the seconds it took."""
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def _save_failed(save_dir: str, rollout_id: int, exc: Exception) -> CheckpointError:
    """What the user reads when the save of ``rollout_id`` fails: the cause (a train rank's own
    error, not Ray's wrapper), and the checkpoint left intact to resume from."""
    cause = getattr(exc, "cause", None) or exc
    try:
        kept = latest_checkpoint(save_dir)
    except OSError:
        kept = None
    left = (
        f"the latest complete checkpoint, {kept}, is intact: fix the cause and resume with --load {save_dir}"
        if kept
        else f"{save_dir} holds no complete checkpoint yet"
    )
    named = "" if isinstance(cause, CheckpointError) else f"{type(cause).__name__}: "
    return CheckpointError(
        f"saving the checkpoint of rollout {rollout_id} under {save_dir} failed: {named}{cause}\n  {left}"
    )
