import asyncio
import threading
import time

import pytest

from slime_core import Sample, SampleStatus, hookimpl
from slime_core.config import Config, OptionSet
from slime_core.faults.nonfinite import NonFiniteError
from slime_core.plugins import Plugins
from slime_core.rollout.reward_hub import RewardHub, scalar_reward


class Judges:
    """A plugin with reward functions that behave in the ways the hub must handle."""

    def __init__(self):
        self.running = 0
        self.peak = 0
        self.lock = threading.Lock()

    @hookimpl
    def slime_register_reward_functions(self, register):
        register("length", lambda sample, config: float(len(sample.response)))
        register("slow", self.slow)
        register("async_upper", self.async_upper)
        register("broken", self.broken)
        register("hangs", lambda sample, config: time.sleep(2) or 1.0)
        register("dict", lambda sample, config: {"score": 2.0, "acc": True})
        register("ranks", lambda samples, config: [float(i) for i, _ in enumerate(samples)])
        register("nan_for_b", lambda sample, config: float("nan") if sample.response == "b" else 1.0)
        register("inf_dict", lambda sample, config: {"score": float("-inf"), "acc": 1.0})
        register("nan_in_group", lambda samples, config: [1.0, float("nan")][: len(samples)])

    def slow(self, sample, config):
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        time.sleep(0.05)
        with self.lock:
            self.running -= 1
        return 1.0

    async def async_upper(self, sample, config):
        await asyncio.sleep(0.01)
        return float(sample.response.isupper())

    def broken(self, sample, config):
        raise ZeroDivisionError("bad grader")


@pytest.fixture
def judges():
    plugins = Plugins()
    judge = Judges()
    plugins.register_object("judges", judge)
    try:
        yield plugins, judge
    finally:
        plugins.unregister("judges")


def hub_for(plugins, **overrides):
    options = OptionSet()
    plugins.add_options(options)
    return RewardHub(Config({**options.defaults(), **overrides}), plugins)


def group(*responses):
    return [Sample(group_index=0, index=i, response=r, status=SampleStatus.COMPLETED) for i, r in enumerate(responses)]


def test_sync_and_async_functions_and_per_sample_override(judges):
    plugins, _ = judges
    samples = group("abc", "HI", "no")
    samples[1].metadata["rm_type"] = "async_upper"
    samples[2].metadata["rm_type"] = "async_upper"
    asyncio.run(hub_for(plugins, rm_type="length").score_group(samples))
    assert [s.reward for s in samples] == [3.0, 1.0, 0.0]


def test_concurrency_is_bounded(judges):
    plugins, judge = judges
    hub = hub_for(plugins, rm_type="slow", rm_max_concurrency=3)
    samples = group(*["x"] * 12)
    start = time.perf_counter()
    asyncio.run(hub.score_group(samples))
    assert judge.peak == 3
    assert all(s.reward == 1.0 for s in samples)
    assert time.perf_counter() - start >= 4 * 0.05 * 0.9


def test_a_raising_function_fails_the_sample_not_the_run(judges):
    plugins, _ = judges
    samples = group("a", "b")
    samples[1].metadata["rm_type"] = "length"
    hub = hub_for(plugins, rm_type="broken")
    asyncio.run(hub.score_group(samples))
    assert samples[0].status is SampleStatus.FAILED and samples[0].reward is None
    assert (
        samples[0].error
        == "reward function 'broken' (plugin 'judges', local module) raised ZeroDivisionError: bad grader"
    )
    assert samples[1].status is SampleStatus.COMPLETED and samples[1].reward == 1.0
    assert hub.metrics() == {"reward/calls": 2, "reward/failed": 1, "reward/timed_out": 0, "reward/non_finite": 0}


def test_a_hanging_function_times_out_and_can_get_a_default_reward(judges):
    plugins, _ = judges
    samples = group("a")
    hub = hub_for(plugins, rm_type="hangs", rm_timeout=0.2, rm_failure_reward=-1.0)
    start = time.perf_counter()
    asyncio.run(hub.score_group(samples))
    assert time.perf_counter() - start < 1.5
    assert samples[0].reward == -1.0 and samples[0].status is SampleStatus.COMPLETED
    assert "timed out after 0.2s" in samples[0].error
    assert hub.metrics()["reward/timed_out"] == 1
    hub.close()


def test_group_reward_function(judges):
    plugins, _ = judges
    samples = group("a", "b", "c")
    asyncio.run(hub_for(plugins, rm_type="ranks", group_rm=True).score_group(samples))
    assert [s.reward for s in samples] == [0.0, 1.0, 2.0]


def test_unknown_per_sample_type_fails_that_sample_with_the_list(judges):
    plugins, _ = judges
    samples = group("a")
    samples[0].metadata["rm_type"] = "lenght"
    asyncio.run(hub_for(plugins, rm_type="length").score_group(samples))
    assert samples[0].status is SampleStatus.FAILED
    assert "unknown reward function 'lenght'; did you mean 'length'?" in samples[0].error


def test_dict_rewards_are_reduced_with_the_reward_key(judges):
    plugins, _ = judges
    samples = group("a")
    asyncio.run(hub_for(plugins, rm_type="dict").score_group(samples))
    assert scalar_reward(samples[0], "score") == 2.0
    with pytest.raises(ValueError, match=r"choose one with --reward-key"):
        scalar_reward(samples[0], None)
    with pytest.raises(ValueError, match=r"--reward-key 'scor' is not in the reward dict"):
        scalar_reward(samples[0], "scor")


def sourced(*responses):
    """A group whose prompt came from line 7 of a data file (as the prompt dataset records it)."""
    samples = group(*responses)
    for i, sample in enumerate(samples):
        sample.group_index, sample.global_index, sample.metadata["source"] = 3, 30 + i, "data/math.jsonl:7"
    return samples


def test_a_nan_reward_stops_with_the_function_the_sample_its_prompt_and_the_value(judges):
    plugins, _ = judges
    with pytest.raises(NonFiniteError) as stopped:
        asyncio.run(hub_for(plugins, rm_type="nan_for_b").score_group(sourced("a", "b")))
    assert str(stopped.value).startswith(
        "reward function 'nan_for_b' (plugin 'judges', local module) returned nan for sample 3/1 (#31) of the prompt "
        "at data/math.jsonl:7: a non-finite reward cannot be trained on"
    )
    assert "--drop-nonfinite-rewards" in str(stopped.value)
    with pytest.raises(NonFiniteError, match=r"returned nan for sample 3/1 \(#31\)"):  # a group reward function too
        asyncio.run(hub_for(plugins, rm_type="nan_in_group", group_rm=True).score_group(sourced("a", "b")))
    with pytest.raises(NonFiniteError, match=r"'inf_dict' .* returned -inf for sample 3/0"):  # the entry trained on
        asyncio.run(hub_for(plugins, rm_type="inf_dict", reward_key="score").score_group(sourced("a")))
    finite_entry = sourced("a")
    asyncio.run(hub_for(plugins, rm_type="inf_dict", reward_key="acc").score_group(finite_entry))
    assert finite_entry[0].reward == {"score": float("-inf"), "acc": 1.0}


def test_with_drop_nonfinite_rewards_the_sample_fails_and_is_counted(judges):
    plugins, _ = judges
    samples = sourced("a", "b", "c")
    hub = hub_for(plugins, rm_type="nan_for_b", drop_nonfinite_rewards=True)
    asyncio.run(hub.score_group(samples))
    assert [s.status for s in samples] == [SampleStatus.COMPLETED, SampleStatus.FAILED, SampleStatus.COMPLETED]
    assert samples[1].reward is None and "returned nan for sample 3/1 (#31)" in samples[1].error
    assert hub.metrics()["reward/non_finite"] == 1


def test_a_nan_reward_set_outside_the_hub_is_refused_where_it_is_read():
    sample = sourced("a")[0]
    sample.reward = float("nan")
    with pytest.raises(
        NonFiniteError, match=r"sample 3/0 \(#30\) of the prompt at data/math.jsonl:7 has the reward nan"
    ):
        scalar_reward(sample, None)
