"""Trackers: every metrics record reaches TensorBoard event files and a W&B offline run,
read back with TensorBoard's own reader and from W&B's run file (no network)."""

import json
import struct
import sys

import pytest

from slime_core.config import load_config
from slime_core.loop.run_dir import RunDir, read_metrics
from slime_core.loop.trackers import TrackerError

RECORDS = [
    (-1, {"eval/addition/reward_mean": 0.25, "time/eval": 1.5}),
    (0, {"rollout/reward_mean": 0.5, "train/ppo_kl": 0.01, "time/rollout": 2.0, "note": "not a number"}),
    (1, {"rollout/reward_mean": 0.75, "train/ppo_kl": 0.02, "time/rollout": 1.0, "eval/addition/reward_mean": 0.5}),
]


@pytest.fixture
def config_of(options, plugins, write_jsonl, tmp_path):
    """``config_of(*flags)``: a resolved config writing to ``tmp_path/run``."""
    prompts = write_jsonl([{"prompt": "1+1=", "label": "2"}])
    required = ["--prompt-data", str(prompts), "--hf-checkpoint", "model", "--rollout-batch-size", "4"]
    return lambda *flags: load_config([*required, "--output-dir", str(tmp_path / "run"), *flags], options, plugins)


def write_run(config, plugins) -> RunDir:
    """A run directory made by `RunDir.create`, fed `RECORDS`, then closed."""
    run = RunDir.create(config, plugins)
    for rollout_id, metrics in RECORDS:
        run.log_metrics(rollout_id, metrics)
    run.close("completed")
    return run


def test_tensorboard_event_files_hold_every_numeric_metric(config_of, plugins):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = write_run(config_of("--use-tensorboard"), plugins)
    events = EventAccumulator(str(run.path / "tensorboard"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {
        "eval/addition/reward_mean",
        "time/eval",
        "rollout/reward_mean",
        "train/ppo_kl",
        "time/rollout",
    }
    assert [(e.step, e.value) for e in events.Scalars("eval/addition/reward_mean")] == [(-1, 0.25), (1, 0.5)]
    assert [(e.step, e.value) for e in events.Scalars("rollout/reward_mean")] == [(0, 0.5), (1, 0.75)]
    assert [r["rollout_id"] for r in read_metrics(run.metrics_file)] == [-1, 0, 1]
    assert json.loads((run.path / "status.json").read_text())["status"] == "completed"


def wandb_records(run_file):
    """The protobuf records of a W&B run file: W&B's 7-byte header, then a LevelDB-style log
    of 32 KiB blocks whose chunks (checksum, length, type) carry serialized `Record`s."""
    from wandb.proto import wandb_internal_pb2

    data, block, pos, pending = run_file.read_bytes(), 32 * 1024, 7, b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block  # the tail of a block too short for a chunk header is padding
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pending, pos = pending + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def test_wandb_offline_run_holds_config_plugins_and_history(config_of, plugins, tmp_path, monkeypatch):
    for variable in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(variable, str(tmp_path / "wandb-home"))
    config = config_of(
        "--use-wandb",
        "--wandb-mode",
        "offline",
        "--wandb-project",
        "proj",
        "--wandb-group",
        "grp",
        "--wandb-run-name",
        "first",
    )
    run = write_run(config, plugins)
    [run_file] = (run.path / "wandb").glob("offline-run-*/run-*.wandb")
    records = list(wandb_records(run_file))
    [started] = [r.run for r in records if r.HasField("run")]
    assert (started.project, started.run_group, started.display_name) == ("proj", "grp", "first")
    config = {item.key: json.loads(item.value_json) for item in started.config.update}
    assert config["rollout_batch_size"] == 4 and config["use_wandb"] is True
    core = config["slime_plugins"]["core"]
    assert core["distribution"] == "slime-core" and core["version"]
    history = [
        {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
        for r in records
        if r.HasField("history")
    ]
    assert [(h["rollout_id"], h.get("rollout/reward_mean")) for h in history] == [(-1, None), (0, 0.5), (1, 0.75)]
    assert history[2]["eval/addition/reward_mean"] == 0.5 and "note" not in history[1]
    assert [r.exit.exit_code for r in records if r.HasField("exit")] == [0]


def test_a_missing_tracker_library_stops_the_run_before_it_starts(config_of, plugins, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # how Python marks a module as not importable
    config = config_of("--use-tensorboard")
    with pytest.raises(
        TrackerError,
        match=r'--use-tensorboard needs the .tensorboardX. package.*pip install "slime-core\[tensorboard\]"',
    ):
        RunDir.create(config, plugins)
    assert not (tmp_path / "run" / "tensorboard").exists()


def test_an_online_wandb_run_without_a_login_says_how_to_fix_it(config_of, plugins, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    for variable in ("HOME", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):  # no stored login either
        monkeypatch.setenv(variable, str(tmp_path / "home"))
    with pytest.raises(TrackerError, match=r"(?s)could not start a W&B run.*wandb login.*--wandb-mode offline"):
        RunDir.create(config_of("--use-wandb", "--wandb-mode", "online"), plugins)
