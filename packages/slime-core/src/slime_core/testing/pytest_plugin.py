"""slime's pytest plugin (the ``pytest11`` entry point of slime-core): fixtures for the tests
of slime's packages and of third-party plugins.

pytest loads this module in every session of an environment where slime-core is installed,
so it imports nothing but pytest, and every fixture is opt-in: a test gets one by naming it.

- ``ray_cluster`` (session): a local Ray instance with its files in a temporary folder.
- ``tiny_model_dir`` (session): a tiny random Qwen3 model with the character tokenizer, on disk.
- ``tiny_vlm_dir`` (session): a tiny random Qwen2.5-VL model with its processor, on disk.
- ``rank_pool`` (session): rank processes kept for the session (`slime_core.rank.processes.RankPool`).
- ``fake_run``: ``slime run`` in this process on the fake backends (`slime_core.testing.fakes`).
- ``install_plugin``: a plugin distribution installed from its source folder for the test.
"""

from __future__ import annotations

import os

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config):
    """Let pytest rewrite the asserts of the kit (`slime_core.testing`) only. pytest marks the
    whole package of a ``pytest11`` plugin, here all of slime_core: it would then parse every
    module a test imports, which slows imports, changes the asserts of the code under test, and
    on some Python 3.11 releases (a CPython bug) fails imports from two threads at once with "AST
    constructor recursion depth mismatch" (an in-process rank and engine import at once)."""
    rewrite = early_config.pluginmanager.rewrite_hook
    marked = getattr(rewrite, "_must_rewrite", None)  # absent with --assert=plain
    if isinstance(marked, set) and "slime_core" in marked:
        marked.discard("slime_core")
        marked.add("slime_core.testing")
        getattr(rewrite, "_marked_for_rewrite_cache", {}).clear()


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray instance for the whole test session (started on first use), with its
    token and session files in a temporary folder; shut down at the end."""
    from slime_core.testing.ray import ray_session

    with ray_session():
        yield


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Qwen3-architecture model with the character tokenizer, saved once."""
    from slime_core.tools.tiny_models import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"))


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory):
    """A tiny random Qwen2.5-VL model (hidden 64) with its processor, saved once."""
    from slime_core.tools.tiny_vlms import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen2_5_vl"), "qwen2_5_vl")


@pytest.fixture(scope="session")
def rank_pool():
    """Rank processes kept for the whole session (`slime_core.rank.processes.RankPool`): each
    multi-rank test runs on them instead of spawning its own (seconds of imports each)."""
    from slime_core.rank.processes import RankPool

    pool = RankPool()
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def fake_run(tiny_model_dir, tmp_path):
    """``fake_run(*flags, output="run", hooks=(), exit_code=0)`` runs ``slime run`` in this
    process on the fake backends (`slime_core.testing.driver.run_on_fakes`) with the installed
    plugins and ``hooks``, the ``digit_share`` reward, 100 addition prompts, 4 groups of 4
    samples of 6 tokens per rollout and ``--lr 2``; ``flags`` come last and win. The run must
    end with ``exit_code``; returns its metrics records of rollouts (none if it failed).
    ``fake_run.tmp_path`` is the folder holding each run's ``output`` directory."""
    from slime_core.loop.run_dir import read_metrics
    from slime_core.testing.driver import run_on_fakes, write_addition_prompts

    data = write_addition_prompts(tmp_path / "prompts.jsonl")
    base = ["--prompt-data", data, "--hf-checkpoint", tiny_model_dir, "--rm-type", "digit_share"]
    base += ["--rollout-batch-size", 4, "--n-samples-per-prompt", 4, "--rollout-max-response-len", 6, "--lr", 2]

    def run(*flags, output="run", hooks=(), exit_code=0):
        assert run_on_fakes([*base, "--output-dir", tmp_path / output, *flags], hooks) == exit_code
        if exit_code:
            return []
        return [r for r in read_metrics(tmp_path / output / "metrics.jsonl") if r["rollout_id"] >= 0]

    run.tmp_path = tmp_path
    return run


@pytest.fixture(scope="session")
def slime_plugin_sites(tmp_path_factory):
    """The plugin distributions `install_plugin` installed this session (`slime_core.testing.plugins.PluginSites`)."""
    from slime_core.testing.plugins import PluginSites

    return PluginSites(tmp_path_factory.mktemp("plugin-sites"))


@pytest.fixture
def install_plugin(slime_plugin_sites, monkeypatch):
    """``install_plugin(folder) -> env``: the plugin distribution whose pyproject.toml is in
    ``folder``, installed for real (pip, once per session) into a folder that this test sees:
    on ``sys.path`` (so ``Plugins()`` finds its entry points in this process) and on
    ``PYTHONPATH`` (so ``slime`` subprocesses do); returns that environment."""

    def install(folder) -> dict[str, str]:
        site = str(slime_plugin_sites.site(folder))
        monkeypatch.syspath_prepend(site)
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")])))
        return dict(os.environ)

    return install
