"""Fixtures of the end-to-end tests: ``slime run`` on the tiny model with CPU engines."""

import json

import pytest

from slime_core import hookimpl
from slime_core.cli.run import run_command
from slime_core.loop.run_dir import read_metrics
from slime_core.plugins import Plugins


def digit_share(sample, config) -> float:
    """The share of response characters that are digits: a random tiny model starts near
    0.1 and GRPO raises it within a few rollouts."""
    return sum(ch.isdigit() for ch in sample.response) / max(len(sample.response), 1)


class _Rewards:
    @staticmethod
    @hookimpl
    def slime_register_reward_functions(register):
        register("digit_share", digit_share)


def _improved(records) -> bool:
    rewards = [r["rollout/reward_mean"] for r in records]
    return sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.02


@pytest.fixture(scope="session")
def improved():
    """``improved(records)``: whether a run's reward rose, the mean of its last two rollouts above
    that of its first two by more than 0.02 (the sync and the async run's check that GRPO learns)."""
    return _improved


@pytest.fixture(scope="session")
def test_rewards():
    """The plugin object that registers the ``digit_share`` reward, for runs made outside `slime_run`."""
    return _Rewards


@pytest.fixture
def slime_run(ray_cluster, tiny_model_dir, tmp_path):
    """``slime_run(*flags)`` runs ``slime run`` in this process (on the test's Ray) with the
    digit reward on addition prompts; returns the run directory's metrics records."""
    data = tmp_path / "prompts.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}=", "label": str(a + b)}) + "\n" for a in range(10) for b in range(10))
    )
    base = [
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--rollout-engine",
        "cpu",
        "--rm-type",
        "digit_share",
        "--rollout-batch-size",
        "8",
        "--n-samples-per-prompt",
        "8",
        "--rollout-max-response-len",
        "8",
        "--lr",
        "5e-3",
        "--use-dynamic-batch-size",
        "--max-tokens-per-gpu",
        "2048",
    ]

    def run(*flags, output="run", hooks=(), exit_code=0):
        """``hooks``: more plugin objects (with ``@hookimpl`` methods) for this run; ``exit_code``:
        the one the run must end with (the records it logged are returned either way)."""
        plugins = Plugins()
        extra = {"loop_test_rewards": _Rewards, **{f"loop_test_hooks_{i}": h for i, h in enumerate(hooks)}}
        for name, obj in extra.items():
            plugins.register_object(name, obj)
        try:
            assert run_command([*base, "--output-dir", str(tmp_path / output), *flags], plugins) == exit_code
        finally:
            for name in extra:
                plugins.unregister(name)
        metrics = tmp_path / output / "metrics.jsonl"
        return [r for r in read_metrics(metrics) if r["rollout_id"] >= 0] if metrics.exists() else []

    run.tmp_path, run.base = tmp_path, base
    return run
