"""When --dynamic-sampling-max-groups stops a rollout, the error names the parts that kept the
generated groups out (failed rewards, the dynamic-sampling filter, aborts), each with its count,
and no part that did not: a run whose reward fails is not told its filter rejects everything."""

from types import SimpleNamespace

import pytest

from slime_core.rollout.default import _Rollout

REWARD_FAILURE = "reward function 'slime.custom_rm' raised ClientConnectorError: Cannot connect to host"


def stopped_short(filter_name=None, **counts) -> str:
    rollout = object.__new__(_Rollout)  # only the counts the message reads
    rollout.config = SimpleNamespace(get=lambda key: {"dynamic_sampling_filter": filter_name}.get(key))
    rollout.target, rollout.accepted, rollout.reward_failure = 2, [], REWARD_FAILURE
    rollout.counts = {"submitted": 12, "failed_reward": 0, "filtered": 0, "aborted": 0, **counts}
    return str(rollout._stopped_short())


@pytest.mark.parametrize("failed, filtered", [(5, 7), (3, 3), (9, 0)])
def test_failed_rewards_are_named_however_many_groups_the_filter_rejected(failed, filtered):
    message = stopped_short("nonzero_std", failed_reward=failed, filtered=filtered)
    assert f"{failed} had a sample whose reward failed, the last: {REWARD_FAILURE}" in message
    assert ("rejected by the dynamic-sampling filter (nonzero_std)" in message) == (filtered > 0)


def test_without_a_filter_or_failures_the_aborts_are_named():
    message = stopped_short(aborted=12)
    assert "12 were aborted before they finished" in message and "filter" not in message
