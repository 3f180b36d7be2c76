"""The plugin's reward function, option and group filter in a real ``slime run`` on the test
kit's fake backends (slime-core's pytest plugin: ``install_plugin``, ``fake_run``), in this
process, in seconds: no Ray, no model, no engine.

The fake policy answers each prompt with 6 characters, each a digit or a letter (θ is the logit
of a digit); the prompts ask for a keyword that is a digit, so the ``keyword`` reward pays for
digits and training on it must raise θ."""

import json
from pathlib import Path

import pytest

from slime_core.testing import Recorder

PLUGIN = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def installed(install_plugin):
    """The plugin, installed from this folder, as its users install it."""
    return install_plugin(PLUGIN)


@pytest.fixture
def keyword_prompts(tmp_path):
    """100 prompts ``"a+b="`` whose keyword is the last digit of the sum."""
    path = tmp_path / "keyword_prompts.jsonl"
    records = [
        {"prompt": f"{a}+{b}=", "label": "", "metadata": {"keyword": str((a + b) % 10)}}
        for a in range(10)
        for b in range(10)
    ]
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def test_training_on_the_keyword_reward_raises_it(fake_run, keyword_prompts):
    records = fake_run("--prompt-data", keyword_prompts, "--rm-type", "keyword", "--num-rollout", "12")
    rewards = [r["rollout/reward_mean"] for r in records]
    assert sum(rewards[6:]) > sum(rewards[:6]), rewards
    assert Recorder.ranks[0].theta > 0  # the policy moved towards digits, which hold the keywords


def test_the_length_bonus_option_reaches_the_reward(fake_run, keyword_prompts):
    fake_run(
        "--prompt-data", keyword_prompts, "--rm-type", "keyword", "--keyword-length-bonus", "0.1", "--num-rollout", "2"
    )
    rewards = Recorder.ranks[-1].batch.rewards
    assert sorted(set(rewards)) == [0.0, pytest.approx(1.4)]  # a hit in 6 characters: 1 + 0.1 × (10 − 6)


def test_the_reward_spread_filter_keeps_only_groups_that_teach_something(fake_run, keyword_prompts):
    records = fake_run(
        "--prompt-data",
        keyword_prompts,
        "--rm-type",
        "keyword",
        "--dynamic-sampling-filter",
        "reward_spread",
        "--min-reward-spread",
        "1.0",
        "--num-rollout",
        "2",
    )
    batch = Recorder.ranks[-1].batch
    groups = {group: [r for r, g in zip(batch.rewards, batch.group_ids) if g == group] for group in batch.group_ids}
    assert len(groups) == 4 and all(max(rewards) - min(rewards) >= 1.0 for rewards in groups.values())
    assert sum(r["rollout/groups_filtered"] for r in records) > 0  # some groups were all misses, and dropped
