"""Fixtures: a resolved config with slime-compat's flags, and the slime-style functions."""

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
if str(HERE) not in sys.path:  # slime_style_*.py, named by dotted path as in a launch script
    sys.path.insert(0, str(HERE))

PLUGINS = "slime_style_plugins"


@pytest.fixture
def calls():
    from slime_style_plugins import CALLS

    CALLS.clear()
    return CALLS


@pytest.fixture
def make_config(tmp_path):
    """``make_config(*flags) -> (config, plugins)``: ``slime run``'s config resolution (with
    its checks) on 8 prompts, 2 per rollout, 2 samples each."""
    from slime_core.cli.run import run_problems
    from slime_core.config import OptionSet, load_config
    from slime_core.plugins import Plugins

    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+1=", "label": str(i + 1)}) + "\n" for i in range(8)))

    def make(*flags):
        plugins = Plugins()
        options = OptionSet()
        plugins.add_options(options)
        argv = [
            "--prompt-data",
            str(data),
            "--hf-checkpoint",
            "unused",
            "--rollout-batch-size",
            "2",
            "--n-samples-per-prompt",
            "2",
            "--global-batch-size",
            "4",
            "--dry-run",
            *flags,
        ]
        return load_config(argv, options, plugins, checks=lambda c: run_problems(c, plugins)), plugins

    return make


@pytest.fixture
def fake_loop(tiny_model_dir, tmp_path):
    """``fake_loop(*flags, rollouts=2, prompts=8, output="run") -> (records, batch)``: ``slime
    run`` in this process on the test kit's fake backends (`slime_core.testing.run_on_fakes`, no
    Ray), 2 groups of 2 samples per rollout from ``prompts`` addition prompts; the run's metrics
    records (evaluations before training included) and the batch the fake rank last trained on."""
    from slime_core.loop.run_dir import read_metrics
    from slime_core.testing import Recorder, run_on_fakes

    def run(*flags, rollouts=2, prompts=8, output="run"):
        data = tmp_path / f"prompts{prompts}.jsonl"
        data.write_text("".join(f'{{"prompt": "{i}+1=", "label": "{i + 1}"}}\n' for i in range(prompts)))
        code = run_on_fakes(
            [
                "--prompt-data",
                str(data),
                "--hf-checkpoint",
                str(tiny_model_dir),
                "--rollout-batch-size",
                "2",
                "--n-samples-per-prompt",
                "2",
                "--rollout-max-response-len",
                "4",
                "--num-rollout",
                str(rollouts),
                "--output-dir",
                str(tmp_path / output),
                *flags,
            ]
        )
        assert code == 0
        return read_metrics(tmp_path / output / "metrics.jsonl"), Recorder.ranks[-1].batch if Recorder.ranks else None

    return run


@pytest.fixture
def digits_loop(fake_loop):
    """``digits_loop(*flags, **fake_loop_options) -> (records, batch)``: `fake_loop` whose slime-style generate function
    answers "7" or "x" (``slime_style_plugins.digits_generate``); the records of the rollouts
    (not of an evaluation before training) and the batch the fake rank last trained on."""

    def run(*flags, **options):
        records, batch = fake_loop("--custom-generate-function-path", PLUGINS + ".digits_generate", *flags, **options)
        return [r for r in records if r["rollout_id"] >= 0], batch

    return run
