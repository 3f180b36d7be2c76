"""`slime run` end to end on CPU: FSDP train ranks and CPU engines as Ray actors, the real
sglang-router, weight updates every rollout, and a reward the tiny model learns in a few steps."""

import json
import subprocess
import sys

import pytest

from slime_core import hookimpl
from slime_core.cli.run import run_command
from slime_core.loop.rollout_metrics import drop_stale_groups
from slime_core.loop.run_dir import read_metrics
from slime_core.plugins import Plugins
from slime_core.sample import Sample

pytestmark = pytest.mark.integration


def digit_share(sample, config) -> float:
    """The share of response characters that are digits: a random tiny model starts near
    0.1 and GRPO raises it within a few rollouts."""
    return sum(ch.isdigit() for ch in sample.response) / max(len(sample.response), 1)


class _Rewards:
    @staticmethod
    @hookimpl
    def slime_register_reward_functions(register):
        register("digit_share", digit_share)


@pytest.fixture
def slime_run(ray_cluster, tiny_model_dir, tmp_path):
    """``slime_run(*flags)`` runs ``slime run`` in this process (on the test's Ray) with the
    digit reward on addition prompts; returns the run directory's metrics records."""
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "label": str(a + b)}) + "\n"
                            for a in range(10) for b in range(10)))
    base = ["--prompt-data", str(data), "--hf-checkpoint", str(tiny_model_dir), "--rollout-engine", "cpu",
            "--rm-type", "digit_share", "--rollout-batch-size", "8", "--n-samples-per-prompt", "8",
            "--rollout-max-response-len", "8", "--lr", "5e-3", "--use-dynamic-batch-size", "--max-tokens-per-gpu", "2048"]

    def run(*flags, output="run"):
        plugins = Plugins()
        plugins.register_object("loop_test_rewards", _Rewards)
        try:
            assert run_command([*base, "--output-dir", str(tmp_path / output), *flags], plugins) == 0
        finally:
            plugins.unregister("loop_test_rewards")
        return [r for r in read_metrics(tmp_path / output / "metrics.jsonl") if r["rollout_id"] >= 0]

    run.tmp_path = tmp_path
    return run


def improved(records) -> bool:
    rewards = [r["rollout/reward_mean"] for r in records]
    return sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.02


def test_sync_colocated_run_learns_and_fills_its_run_directory(slime_run, tmp_path):
    eval_data = tmp_path / "eval.jsonl"
    eval_data.write_text("".join(json.dumps({"prompt": f"{a}+1=", "label": str(a + 1)}) + "\n" for a in range(6)))
    records = slime_run("--num-rollout", "6", "--colocate", "--check-weight-update-equal", "--dump-rollouts",
                        "--eval-prompt-data", "small", str(eval_data), "--eval-interval", "3")
    assert [r["rollout_id"] for r in records] == list(range(6))
    assert improved(records), [r["rollout/reward_mean"] for r in records]
    last = records[-1]
    assert last["weight_version"] == 6 and last["weight_update/bytes"] > 0
    assert last["weight_update/max_logprob_diff"] < 1e-3  # the engines got exactly the trainer's weights
    assert last["train/train_rollout_logprob_abs_diff"] < 1e-3
    assert {"eval/small/reward_mean", "time/eval"} <= set(records[2]) and "eval/small/reward_mean" not in records[3]
    run_dir = tmp_path / "run"
    assert "rollout_batch_size: 8" in (run_dir / "config.yaml").read_text()
    plugins = {p["distribution"] for p in json.loads((run_dir / "plugins.json").read_text())}
    assert {"slime-core", "slime-fsdp", "slime-sglang", "slime-router"} <= plugins
    dumped = [json.loads(line) for line in (run_dir / "rollouts" / "rollout_000005.jsonl").read_text().splitlines()]
    assert len(dumped) == 64 and all(len(s["loss_mask"]) == s["response_length"] for s in dumped)
    assert sum(s["reward"] for s in dumped) / 64 == pytest.approx(last["rollout/reward_mean"])
    log = (run_dir / "slime.log").read_text()
    assert "[rollout 6/6]" in log and "placement: 1 bundles (1 training ranks, engines sharing" in log


def test_async_run_learns_with_one_version_of_staleness(slime_run):
    """Disaggregated: the weights reach the engine by a gloo broadcast from the driver."""
    records = slime_run("--num-rollout", "6", "--async", "--max-staleness", "1", "--update-weight-transport", "broadcast")
    assert improved(records), [r["rollout/reward_mean"] for r in records]
    assert records[0]["rollout/staleness_max"] == 0
    assert all(r["rollout/staleness_max"] == 1 and r["rollout/stale_groups_dropped"] == 0 for r in records[1:])
    assert all("time/wait_rollout" in r for r in records)
    assert records[-1]["weight_version"] == 6 and records[-1]["weight_update/bytes"] > 0
    assert "placement: 2 bundles (1 training ranks, engines one bundle per engine)" in (slime_run.tmp_path / "run" / "slime.log").read_text()


def test_groups_beyond_the_staleness_bound_are_dropped_and_counted():
    fresh, old = [Sample(weight_versions=[4, 5])], [Sample(weight_versions=[2, 5])]
    kept, dropped = drop_stale_groups([fresh, old, fresh], version=5, max_staleness=2)
    assert kept == [fresh, fresh] and dropped == 1
    assert drop_stale_groups([old], version=5, max_staleness=None) == ([old], 0)


def test_bad_configs_fail_before_any_process_starts_with_every_error(tmp_path, tiny_model_dir):
    command = [sys.executable, "-m", "slime_core.cli.main", "run", "--prompt-data", str(tmp_path / "missing.jsonl"),
               "--hf-checkpoint", str(tiny_model_dir), "--rollout-batch-size", "3", "--n-samples-per-prompt", "2",
               "--global-batch-size", "4", "--rm-type", "no_such_reward", "--train-backend", "no_such_backend",
               "--num-rollout", "2", "--output-dir", str(tmp_path / "run")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    for expected in ("missing.jsonl", "--global-batch-size 4", "no_such_reward", "no_such_backend"):
        assert expected in done.stderr, done.stderr
    assert not (tmp_path / "run").exists()  # nothing was started or written


def test_resuming_a_checkpoint_gives_the_next_rollout_of_an_uninterrupted_run(slime_run, tmp_path):
    """Same prompts in the same order (the data source's state), same weights and optimizer,
    same sampling (per-sample seeds); weights reach the engines through a directory here."""
    flags = ("--update-weight-transport", "disk")
    whole = slime_run("--num-rollout", "3", *flags, output="whole")
    slime_run("--num-rollout", "2", "--save-interval", "2", "--save", str(tmp_path / "ckpt"), *flags, output="first")
    resumed = slime_run("--num-rollout", "3", "--load", str(tmp_path / "ckpt"), *flags, output="second")
    assert [r["rollout_id"] for r in resumed] == [2]
    for key in ("rollout/reward_mean", "rollout/response_length_mean", "train/loss", "train/grad_norm", "weight_version"):
        assert resumed[0][key] == pytest.approx(whole[2][key], rel=1e-4, abs=1e-6), key


@pytest.mark.parametrize("stop_signal", ["SIGINT", "SIGTERM"])
def test_a_stopped_run_leaves_no_process_behind(tmp_path, tiny_model_dir, stop_signal):
    """Stopped mid-run (Ctrl-C, or a scheduler's SIGTERM), `slime run` shuts its engines, router,
    train ranks and Ray down: no process it started outlives it."""
    import os
    import shutil
    import signal
    import tempfile
    import time

    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+1=", "label": str(a + 1)}) + "\n" for a in range(50)))
    ray_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit in 108 bytes
    env = dict(os.environ, HOME=ray_dir, RAY_TMPDIR=ray_dir)
    command = [sys.executable, "-m", "slime_core.cli.main", "run", "--prompt-data", str(data), "--hf-checkpoint",
               str(tiny_model_dir), "--rollout-engine", "cpu", "--rm-type", "exact_match", "--num-rollout", "1000",
               "--rollout-batch-size", "4", "--n-samples-per-prompt", "2", "--rollout-max-response-len", "4",
               "--output-dir", str(tmp_path / "run")]
    driver = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        metrics = tmp_path / "run" / "metrics.jsonl"
        deadline = time.monotonic() + 180
        while not (metrics.exists() and metrics.read_text().strip()):
            assert driver.poll() is None and time.monotonic() < deadline, "the run did not get to its first rollout"
            time.sleep(0.5)
        started = descendants(driver.pid)
        assert len(started) >= 3  # Ray's processes, the train rank, the engine and the router at least
        driver.send_signal(getattr(signal, stop_signal))
        assert driver.wait(timeout=120) == 130
        time.sleep(2)
        assert [pid for pid in started if alive(pid)] == []
    finally:
        driver.kill()
        shutil.rmtree(ray_dir, ignore_errors=True)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc's parent links)."""
    from pathlib import Path

    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent's wait() has stopped)."""
    from pathlib import Path

    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
