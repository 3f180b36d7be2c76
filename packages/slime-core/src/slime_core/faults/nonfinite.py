"""Non-finite values (NaN, ±inf): what a run does when one appears, and the error that stops it.

- A reward: an error naming the reward function, the sample and the value (`RewardHub`), or,
  with ``--drop-nonfinite-rewards``, the sample is marked failed like one whose reward raised
  and counted in ``reward/non_finite``.
- A loss or gradient norm: the train ranks skip that optimizer step, all of them
  (``slime_core.rank.step.RankStep.apply_step``); the driver counts skipped steps
  (`SkippedSteps`) and, with Megatron-LM's ``--check-for-nan-in-loss-and-grad`` (the default),
  stops the run after ``--max-consecutive-skipped-steps`` in a row (Megatron-LM stops at the
  first). ``--no-check-for-nan-in-loss-and-grad`` keeps skipping them without a stop, which is
  what THUDM slime does with that flag (its answer to NaN gradients).
- Weights: the driver refuses to push to the engines or save a checkpoint of weights that are
  not finite (``TrainGroup.check_finite_weights``), the last line of defence against what the
  skip cannot see: a hook that writes them, a loaded checkpoint that holds them.

Every such stop raises `NonFiniteError`, a ``slime_core.faults.run_error.RunError``: ``slime run``
prints its message (no traceback), records it in ``slime.log`` and exits with 1. Checkpoints
already written stay as they are.
"""

from __future__ import annotations

from slime_core.faults.run_error import RunError


class NonFiniteError(RunError):
    """A non-finite value stopped the run; the message names where it came from and the fix."""


class SkippedSteps:
    """Counts optimizer steps the ranks skipped for a non-finite loss or gradient norm (the
    step's metrics say ``skipped_step`` 1.0), and stops the run after ``limit`` in a row
    (None: never)."""

    def __init__(self, limit: int | None):
        self.limit = limit
        self.in_a_row = 0
        self.total = 0

    def record(self, rollout_id: int, step: int, metrics: dict[str, float]) -> None:
        """Count step ``step`` of rollout ``rollout_id``; raise `NonFiniteError` at the limit."""
        if not metrics.get("skipped_step"):
            self.in_a_row = 0
            return
        self.in_a_row += 1
        self.total += 1
        if self.limit is not None and self.in_a_row >= self.limit:
            raise NonFiniteError(
                f"rollout {rollout_id}, step {step}: {self.in_a_row} optimizer steps in a row had a non-finite loss or "
                f"gradient norm (loss {metrics.get('loss')}, grad_norm {metrics.get('grad_norm')}) and were skipped; "
                "the weights are those of the last good step. Check the rewards, the loss and --lr; "
                "--max-consecutive-skipped-steps sets the limit, --no-check-for-nan-in-loss-and-grad lifts it"
            )

    def metrics(self) -> dict[str, float]:
        return {"train/skipped_steps_total": float(self.total), "train/skipped_steps_in_a_row": float(self.in_a_row)}
