"""The console line printed after every rollout: counters, ETA, reward and throughput."""

from __future__ import annotations

import time


class Progress:
    """Formats one line per rollout; the ETA extrapolates the mean time per rollout so far.
    ``show_reward``: False for supervised runs (``--loss-type sft_loss``), whose samples carry
    no reward (their 0.0 would read as a failing run); ``show_loss``: False when nothing
    trains (``--debug-rollout-only``)."""

    def __init__(self, first_rollout: int, num_rollout: int, show_reward: bool = True, show_loss: bool = True):
        self.first, self.total = first_rollout, num_rollout
        self.show_reward, self.show_loss = show_reward, show_loss
        self.started = time.monotonic()

    def line(self, rollout_id: int, metrics: dict[str, float]) -> str:
        done = rollout_id + 1 - self.first
        elapsed = time.monotonic() - self.started
        eta = elapsed / max(done, 1) * (self.total - rollout_id - 1)
        parts = [
            f"[rollout {rollout_id + 1}/{self.total}]",
            *([f"reward {metrics.get('rollout/reward_mean', float('nan')):.3f}"] if self.show_reward else []),
            f"len {metrics.get('rollout/response_length_mean', float('nan')):.1f}",
            *(_loss(metrics) if self.show_loss else []),
            f"{metrics.get('perf/step_seconds', 0.0):.2f} s/step",
            f"{metrics.get('perf/tokens_per_second', 0.0):,.0f} tok/s",
            f"ETA {_clock(eta)}",
        ]
        evals = [
            f"{key[5:]} {value:.3f}"
            for key, value in metrics.items()
            if key.startswith("eval/") and key.endswith("/reward_mean")
        ]
        return "  ".join(parts + evals + _nonfinite(metrics))


def _loss(metrics: dict[str, float]) -> list[str]:
    """The policy's loss; a rollout that trained the critic alone (``--num-critic-only-steps``)
    has none, and shows the critic's value loss instead (a missing loss is not a NaN one)."""
    if "train/loss" in metrics:
        return [f"loss {metrics['train/loss']:.4f}"]
    if "critic/value_loss" in metrics:
        return [f"value loss {metrics['critic/value_loss']:.4f} (critic only)"]
    return []


def _nonfinite(metrics: dict[str, float]) -> list[str]:
    """What non-finite values cost so far, once they cost anything: optimizer steps skipped
    (this rollout's, and in a row) and samples dropped for a non-finite reward (the run's)."""
    out = []
    if metrics.get("train/skipped_steps"):
        out.append(
            f"SKIPPED {metrics['train/skipped_steps']:.0f} non-finite steps "
            f"({metrics.get('train/skipped_steps_in_a_row', 0.0):.0f} in a row)"
        )
    if metrics.get("reward/non_finite"):
        out.append(f"dropped {metrics['reward/non_finite']:.0f} non-finite rewards so far")
    return out


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
