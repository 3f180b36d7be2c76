import pytest

from slime_core import Sample, SampleStatus
from slime_core.config import Config
from slime_core.plugins import Plugins
from slime_core.rollout.filters import RolloutProgress

CONFIG = Config({"reward_key": None, "sample_filter_max_tokens": 4})
PLENTY = RolloutProgress(needed=4, accepted=1, in_flight=8)
SCARCE = RolloutProgress(needed=4, accepted=1, in_flight=2)


def group(*rewards):
    return [Sample(group_index=0, index=i, reward=r, status=SampleStatus.COMPLETED) for i, r in enumerate(rewards)]


@pytest.fixture(scope="module")
def registries():
    plugins = Plugins()
    return plugins.registry("group_filters"), plugins.registry("sample_filters")


def test_nonzero_std_keeps_only_groups_with_a_signal(registries):
    keep = registries[0].get("nonzero_std")
    assert keep(group(1.0, 0.0, 1.0), CONFIG, PLENTY)
    assert not keep(group(1.0, 1.0, 1.0), CONFIG, PLENTY)
    assert not keep(group(0.0, 0.0), CONFIG, PLENTY)
    failed = group(1.0, 0.0)
    failed[1].status, failed[1].reward = SampleStatus.FAILED, None
    assert not keep(failed, CONFIG, PLENTY)


def test_nonzero_std_needs_a_sample_std_above_1e_6_as_slime(registries):
    """The std of two rewards is |a - b| / √2: rewards 1e-6 apart (std 7.1e-7) or differing
    by float noise count as equal; 2e-6 apart (std 1.4e-6) they do not."""
    keep = registries[0].get("nonzero_std")
    assert not keep(group(0.0, 1e-6), CONFIG, PLENTY)
    assert not keep(group(1.0, 1.0 + 1e-9, 1.0), CONFIG, PLENTY)
    assert keep(group(0.0, 2e-6), CONFIG, PLENTY)
    assert not keep(group(1.0), CONFIG, PLENTY)


def test_dict_rewards_use_the_reward_key(registries):
    keep = registries[0].get("nonzero_std")
    samples = group({"acc": 1.0, "len": 3}, {"acc": 1.0, "len": 5})
    assert not keep(samples, Config({"reward_key": "acc"}), PLENTY)
    assert keep(samples, Config({"reward_key": "len"}), PLENTY)


def test_scarce_variant_keeps_flat_groups_only_when_the_batch_would_starve(registries):
    keep = registries[0].get("nonzero_std_unless_scarce")
    assert not keep(group(1.0, 1.0), CONFIG, PLENTY)
    assert keep(group(1.0, 1.0), CONFIG, SCARCE)
    assert keep(group(1.0, 0.0), CONFIG, PLENTY)
    assert not keep(group(0.0, 1e-6), CONFIG, PLENTY) and keep(group(0.0, 1e-6), CONFIG, SCARCE)


def test_sample_filters(registries):
    truncated = registries[1].get("drop_truncated")
    long = registries[1].get("drop_over_length")
    sample = Sample(tokens=[1, 2, 3], status=SampleStatus.TRUNCATED)
    assert not truncated(sample, CONFIG)
    sample.status = SampleStatus.COMPLETED
    assert truncated(sample, CONFIG)
    assert long(sample, CONFIG)
    sample.tokens.extend([4, 5])
    assert not long(sample, CONFIG)
    with pytest.raises(ValueError, match="needs --sample-filter-max-tokens"):
        long(sample, Config({"sample_filter_max_tokens": None}))
