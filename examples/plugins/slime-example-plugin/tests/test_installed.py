"""The example third-party plugin, installed for real (the test kit's ``install_plugin``) and
found through its entry point by ``slime`` itself: listed, selected, blocked, scoring."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[1]
ROOT = PLUGIN.parents[2]  # the repository: the commands below name its quickstart config
SLIME = str(Path(sys.executable).with_name("slime"))


@pytest.fixture
def installed(install_plugin):
    return install_plugin(PLUGIN)


def slime(*args, env):
    return subprocess.run([SLIME, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def test_installed_plugin_is_listed_with_what_it_registers(installed):
    plugins = {p["name"]: p for p in json.loads(slime("plugins", env=installed).stdout)}
    example = plugins["example"]
    assert (example["distribution"], example["version"]) == ("slime-example-plugin", "0.1.0")
    assert example["registers"] == {"group_filters": ["reward_spread"], "reward_functions": ["keyword"]}
    assert example["hooks"] == ["slime_add_options", "slime_register_group_filters", "slime_register_reward_functions"]


def test_dry_run_selects_the_plugins_components_and_options(installed):
    result = slime(
        "run",
        "examples/quickstart/grpo_addition.yaml",
        "--dry-run",
        "--rm-type",
        "keyword",
        "--dynamic-sampling-filter",
        "reward_spread",
        "--min-reward-spread",
        "0.25",
        env=installed,
    )
    assert result.returncode == 0, result.stderr
    assert "- rm_type: keyword -> plugin 'example' (slime-example-plugin 0.1.0)" in result.stdout
    assert "- dynamic_sampling_filter: reward_spread -> plugin 'example' (slime-example-plugin 0.1.0)" in result.stdout
    assert "min_reward_spread: 0.25" in result.stdout


def test_blocked_and_autoload_off(installed):
    blocked = {**installed, "SLIME_BLOCK_PLUGINS": "example"}
    assert "example" not in {p["name"] for p in json.loads(slime("plugins", env=blocked).stdout)}
    off = {**installed, "SLIME_DISABLE_PLUGIN_AUTOLOAD": "1"}
    assert [p["name"] for p in json.loads(slime("plugins", env=off).stdout)] == ["core"]
    loaded_by_p = json.loads(slime("-p", "slime_example_plugin", "plugins", env=off).stdout)
    assert [p["name"] for p in loaded_by_p] == ["core", "slime_example_plugin"]
    assert loaded_by_p[1]["distribution"] == "slime-example-plugin"


def test_plugin_option_is_an_unknown_flag_without_the_plugin():
    result = slime("run", "examples/quickstart/grpo_addition.yaml", "--min-reward-spread", "0.25", env=dict(os.environ))
    assert result.returncode == 2
    assert "unknown option --min-reward-spread" in result.stderr


def test_reward_score_uses_the_plugins_reward_and_option(installed, tmp_path):
    data = tmp_path / "responses.jsonl"
    data.write_text(
        json.dumps({"response": "ok cat", "label": "", "metadata": {"keyword": "CAT"}})
        + "\n"
        + json.dumps({"response": "a dog", "label": "", "metadata": {"keyword": "cat"}})
        + "\n"
    )
    out = tmp_path / "scored.jsonl"
    result = slime(
        "reward",
        "score",
        str(data),
        "--rm-type",
        "keyword",
        "--keyword-length-bonus",
        "0.1",
        "-o",
        str(out),
        env=installed,
    )
    assert result.returncode == 0, result.stderr
    rewards = [json.loads(line)["reward"] for line in out.read_text().splitlines()]
    assert rewards == [pytest.approx(1.4), 0.0]
    assert "scored 2 lines: mean reward 0.7000, 0 failed, 0 malformed" in result.stderr
