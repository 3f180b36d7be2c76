"""Sample filters: drop single samples from training while the rest of the group stays."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_core.sample import Sample, SampleStatus

if TYPE_CHECKING:
    from slime_core.config.config import Config


def drop_truncated(sample: Sample, config: Config) -> bool:
    """Keep only responses that ended by themselves (DAPO's over-long filtering): a response
    cut at the length limit is not evidence that its reward reflects its content."""
    return sample.status is not SampleStatus.TRUNCATED


def drop_over_length(sample: Sample, config: Config) -> bool:
    """Keep samples whose prompt + response fit in ``--sample-filter-max-tokens`` tokens."""
    limit = getattr(config, "sample_filter_max_tokens", None)
    if limit is None:
        raise ValueError("the drop_over_length filter needs --sample-filter-max-tokens")
    return len(sample.tokens) <= limit
