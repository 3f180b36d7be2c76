"""`slime run` with over-sampling, a dynamic-sampling filter and partial rollout: the surplus is aborted on
every engine behind the router and comes back first in the next rollout."""

import pytest

pytestmark = pytest.mark.integration


def test_over_sampling_with_a_filter_and_partial_rollout_abort_every_engine_behind_the_router(slime_run):
    """Once the batch is full, the rest is aborted on each engine (sglang-router forwards
    generation, not /abort_request, which it answered with 404), and with --partial-rollout the
    aborted groups come back first in the next rollout. With two data-parallel train ranks, the
    weight check gives each rank a probe (one probe group could not feed two ranks)."""
    records = slime_run(
        "--num-rollout",
        "3",
        "--over-sampling-batch-size",
        "12",
        "--rollout-concurrency",
        "16",
        "--dynamic-sampling-filter",
        "nonzero_std",
        "--partial-rollout",
        "--actor-num-gpus-per-node",
        "2",
        "--check-weight-update-equal",
    )
    assert all(r["rollout/samples"] == 64 for r in records)  # exactly the batch, every time
    assert sum(r["rollout/groups_aborted"] for r in records) > 0
    assert all(r["rollout/groups_submitted"] >= 8 for r in records)
    assert all(r["weight_update/max_logprob_diff"] < 1e-3 for r in records)
