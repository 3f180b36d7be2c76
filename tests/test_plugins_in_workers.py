"""A local plugin given with ``slime -p MODULE`` is the run's plugin everywhere: its policy
loss runs inside the train rank (a Ray actor, another process), its sample filter takes
samples out of the loss, and its step hooks fire around every optimizer step. The module is
importable only from the directory `slime` runs in (no PYTHONPATH), as a user's would be."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

pytestmark = pytest.mark.integration

PLUGIN = '''
import json
import os
from pathlib import Path

from slime_core import hookimpl

HERE = Path(__file__).parent


def counting_loss(*args, **kwargs):
    """PPO's clipped loss, noting the process it runs in."""
    from slime_core.algorithms.policy_loss import ppo_loss_fn

    with open(HERE / "loss_pids.txt", "a") as out:
        out.write(f"{os.getpid()}\\n")
    return ppo_loss_fn(*args, **kwargs)


def odd_samples_out(sample, config):
    return sample.index % 2 == 0


@hookimpl
def slime_register_policy_losses(register):
    register("counting_ppo", counting_loss)


@hookimpl
def slime_register_sample_filters(register):
    register("odd_samples_out", odd_samples_out)


@hookimpl
def slime_register_reward_functions(register):
    register("digit_share", lambda sample, config: sum(c.isdigit() for c in sample.response) / max(len(sample.response), 1))


@hookimpl
def slime_before_run(config):
    (HERE / "driver_pid.txt").write_text(str(os.getpid()))


@hookimpl
def slime_before_train_step(rollout_id, step):
    with open(HERE / "steps.jsonl", "a") as out:
        out.write(json.dumps(["before", rollout_id, step]) + "\\n")


@hookimpl
def slime_after_train_step(rollout_id, step, metrics):
    with open(HERE / "steps.jsonl", "a") as out:
        out.write(json.dumps(["after", rollout_id, step, sorted(metrics)]) + "\\n")
'''  # noqa: E501


def test_a_p_plugin_runs_in_the_train_ranks_and_its_filter_and_step_hooks_apply(tmp_path, tiny_model_dir):
    (tmp_path / "my_plugin.py").write_text(PLUGIN)
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+1=", "label": str(a + 1)}) + "\n" for a in range(20)))
    ray_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit in 108 bytes
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "SLIME_PLUGINS")}
    env.update(HOME=ray_dir, RAY_TMPDIR=ray_dir)
    command = [
        sys.executable,
        "-m",
        "slime_core.cli.main",
        "-p",
        "my_plugin",
        "run",
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--rollout-engine",
        "cpu",
        "--rm-type",
        "digit_share",
        "--loss-type",
        "counting_ppo",
        "--sample-filter",
        "odd_samples_out",
        "--rollout-batch-size",
        "4",
        "--n-samples-per-prompt",
        "4",
        "--num-steps-per-rollout",
        "2",
        "--rollout-max-response-len",
        "4",
        "--num-rollout",
        "2",
        "--output-dir",
        str(tmp_path / "run"),
    ]
    try:
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]  # a clean run stops its actors quietly
    pids = set((tmp_path / "loss_pids.txt").read_text().split())
    assert len(pids) == 1 and (tmp_path / "driver_pid.txt").read_text() not in pids  # the train rank's process
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout/samples_filtered"] for r in records] == [8.0, 8.0]  # samples 1 and 3 of every group
    steps = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [s[:3] for s in steps] == [[w, r, k] for r in range(2) for k in range(2) for w in ("before", "after")]
    assert all({"loss", "grad_norm"} <= set(s[3]) for s in steps if s[0] == "after")
