"""`slime run` in asynchronous mode (``--async``): the next rollout is generated while the current one
trains, with a bounded, recorded staleness; groups beyond the bound are dropped."""

import pytest

from slime_core.rollout.metrics import drop_stale_groups
from slime_core.sample import Sample

pytestmark = pytest.mark.integration


def test_async_run_learns_with_one_version_of_staleness(slime_run, improved):
    """Disaggregated: the weights reach the engine by a gloo broadcast from the driver."""
    records = slime_run(
        "--num-rollout", "6", "--async", "--max-staleness", "1", "--update-weight-transport", "broadcast"
    )
    assert improved(records), [r["rollout/reward_mean"] for r in records]
    # A sample reports the weights that finished it: generated while the previous rollout
    # trained, it is one version behind, or none when it finished after that weight update.
    staleness = [r["rollout/staleness_max"] for r in records]
    assert staleness[0] == 0 and set(staleness[1:]) <= {0, 1} and 1 in staleness[1:], staleness
    assert all(r["rollout/stale_groups_dropped"] == 0 for r in records)
    assert all("time/wait_rollout" in r for r in records)
    assert records[-1]["weight_version"] == 6 and records[-1]["weight_update/bytes"] > 0
    log = (slime_run.tmp_path / "run" / "slime.log").read_text()
    assert "placement: 2 bundles (1 training ranks, engines one bundle per engine)" in log
    # The start-up timeline: each part once, in the order it became ready (ranks, engines and
    # the router start side by side, so those three may come in any order; the router is
    # given the engines once both are up).
    events = [line.split("s  ", 1)[1] for line in log.splitlines() if line.startswith("start-up ")]
    assert events[:2] == ["Ray up", "placement reserved"]
    assert sorted(events[2:6]) == ["engines healthy", "engines routed", "router ready", "train ranks loaded"]
    assert events.index("engines routed") > max(events.index("engines healthy"), events.index("router ready"))
    assert events[6:] == ["first rollout submitted", "first rollout generated"]
    seconds = [float(line.split()[1].rstrip("s")) for line in log.splitlines() if line.startswith("start-up ")]
    assert seconds == sorted(seconds)


def test_groups_beyond_the_staleness_bound_are_dropped_and_counted():
    fresh, old = [Sample(weight_versions=[4, 5])], [Sample(weight_versions=[2, 5])]
    kept, dropped = drop_stale_groups([fresh, old, fresh], version=5, max_staleness=2)
    assert kept == [fresh, fresh] and dropped == 1
    assert drop_stale_groups([old], version=5, max_staleness=None) == ([old], 0)
