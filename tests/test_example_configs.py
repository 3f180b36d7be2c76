"""Every shipped example config loads and validates (paths are relative to the repo root)."""

from pathlib import Path

import pytest

from slime_core.config import OptionSet, load_config
from slime_core.plugins import Plugins

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "examples").rglob("*.yaml"))


def test_examples_ship_configs():
    assert CONFIGS


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_config_loads(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    plugins = Plugins()
    options = OptionSet()
    plugins.add_options(options)
    config = load_config([str(path)], options, plugins)
    first_line = path.read_text().splitlines()[0]
    assert first_line.startswith("#"), "an example config opens with a comment"
    assert "slime run" in path.read_text().split("\n\n")[0], "an example config opens with the command that runs it"
    assert (
        config.rollout_batch_size * config.n_samples_per_prompt
        == config.global_batch_size * config.num_steps_per_rollout
    )
