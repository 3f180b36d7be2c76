"""Fixtures: a resolved config with slime-compat's flags, and the slime-style functions."""

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
if str(HERE) not in sys.path:  # slime_style_plugins.py, named by dotted path as in a launch script
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
        argv = ["--prompt-data", str(data), "--hf-checkpoint", "unused", "--rollout-batch-size", "2",
                "--n-samples-per-prompt", "2", "--global-batch-size", "4", "--dry-run", *flags]
        return load_config(argv, options, plugins, checks=lambda c: run_problems(c, plugins)), plugins

    return make
