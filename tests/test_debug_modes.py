"""Debug modes of ``slime run``: rollouts without training, and saved rollouts replayed into
training without engines (deterministic: the same training metrics as the original run)."""

import json

import pytest

pytestmark = pytest.mark.integration


def test_replaying_saved_rollouts_gives_the_same_training(slime_run, tmp_path, tiny_model_dir):
    saved = str(tmp_path / "dbg" / "rollout_{rollout_id}.json")
    original = slime_run("--num-rollout", "2", "--save-debug-rollout-data", saved, output="original")
    replayed = slime_run("--num-rollout", "2", "--load-debug-rollout-data", saved, output="replayed")
    train_keys = sorted(k for k in original[0] if k.startswith("train/"))
    assert "train/loss" in train_keys and "train/grad_norm" in train_keys
    for before, after in zip(original, replayed):
        assert {k: after[k] for k in train_keys} == {k: before[k] for k in train_keys}
        assert after["rollout/reward_mean"] == before["rollout/reward_mean"]
    assert "weight_update/seconds" in original[0] and "weight_update/seconds" not in replayed[0]  # no engines
    assert "placement: 1 bundles (1 training ranks)\n" in (tmp_path / "replayed" / "slime.log").read_text()  # no engine
    record = json.loads((tmp_path / "dbg" / "rollout_1.json").read_text())
    assert record["rollout_id"] == 1 and len(record["groups"]) == 8 and len(record["groups"][0]) == 8
    # --load-debug-rollout-data-subsample: a quarter of the 64 samples, the first 8 and the last 8, are trained on
    quarter = slime_run(
        "--num-rollout", "1", "--load-debug-rollout-data", saved, "--load-debug-rollout-data-subsample", "0.25"
    )
    assert original[0]["rollout/samples"] == 64 and quarter[0]["rollout/samples"] == 16
    assert quarter[0]["perf/tokens"] < replayed[0]["perf/tokens"]  # trained on fewer tokens


def test_rollout_only_generates_and_scores_without_training(slime_run, tmp_path):
    saved = str(tmp_path / "dbg" / "rollout_{rollout_id}.json")
    records = slime_run("--num-rollout", "2", "--debug-rollout-only", "--save-debug-rollout-data", saved)
    assert [r["rollout_id"] for r in records] == [0, 1]
    assert all(r["rollout/samples"] == 64 and "weight_version" not in r for r in records)
    assert not any(k.startswith(("train/", "weight_update/")) for r in records for k in r)
    assert (tmp_path / "dbg" / "rollout_1.json").is_file()
    log = (tmp_path / "run" / "slime.log").read_text()
    assert "placement: 1 bundles (engines one bundle per engine)\n" in log  # no training bundle reserved
    progress = [line for line in log.splitlines() if line.startswith("[rollout ")]
    assert len(progress) == 2 and not any("loss" in line for line in progress)  # nothing trains


def test_debug_options_are_checked_before_anything_starts(tmp_path, tiny_model_dir):
    from slime_core.config import OptionSet, load_config
    from slime_core.config.config import ConfigError
    from slime_core.plugins import Plugins

    plugins = Plugins()
    options = OptionSet()
    plugins.add_options(options)
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    base = ["--prompt-data", str(data), "--hf-checkpoint", str(tiny_model_dir), "--rollout-batch-size", "1"]
    with pytest.raises(ConfigError) as error:
        load_config(
            [*base, "--debug-train-only", "--debug-rollout-only", "--save-debug-rollout-data", "x.json"],
            options,
            plugins,
        )
    message = str(error.value)
    assert "--load-debug-rollout-data" in message and "exclude each other" in message and "{rollout_id}" in message
