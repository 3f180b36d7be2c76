"""What group filters (dynamic sampling) see about the rollout they filter for."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RolloutProgress:
    """Where the current rollout stands when a group filter is asked about a group."""

    needed: int  # groups the rollout must return (--rollout-batch-size)
    accepted: int  # groups accepted so far
    in_flight: int  # groups still generating or scoring
