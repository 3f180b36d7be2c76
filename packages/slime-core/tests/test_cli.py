"""The `slime` command, run as users run it: in a subprocess."""

import json
import subprocess
import sys
import time
from pathlib import Path

SLIME = str(Path(sys.executable).with_name("slime"))


def run(*args, env=None, cwd=None):
    return subprocess.run([SLIME, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def test_import_and_help_do_not_import_torch():
    code = (
        "import sys, slime_core, slime_core.cli.main as m\n"
        "from slime_core.plugins import Plugins\n"
        "Plugins().describe()\n"
        "try:\n    m.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [name for name in ('torch', 'ray', 'transformers') if name in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_run_checks_a_config_without_importing_torch(tiny_model_dir):
    """`slime run` checks its config before it starts anything; torch (~1.4 CPU-s) is imported
    only after the checks pass, so a config mistake is answered at once."""
    quickstart = Path(__file__).resolve().parents[3] / "examples" / "quickstart" / "grpo_addition.yaml"
    code = (
        "import sys\n"
        "from slime_core.cli.run import run_problems\n"
        "from slime_core.config import OptionSet, load_config\n"
        "from slime_core.plugins import Plugins\n"
        "plugins, options = Plugins(), OptionSet()\n"
        "plugins.add_options(options)\n"
        f"argv = [{str(quickstart)!r}, '--hf-checkpoint', {str(tiny_model_dir)!r}]\n"
        "config = load_config(argv, options, plugins, checks=lambda c: run_problems(c, plugins))\n"
        "print(config.loss_type, [name for name in ('torch', 'transformers') if name in sys.modules])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=quickstart.parents[2]
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["policy_loss", "[]"], result.stdout


def test_help_answers_fast():
    run("--help")  # warm the file cache
    start = time.perf_counter()
    result = run("--help")
    elapsed = time.perf_counter() - start
    assert result.returncode == 0 and "run" in result.stdout and "plugins" in result.stdout
    assert elapsed < 1.0, f"slime --help took {elapsed:.2f}s"


def test_run_help_lists_options_by_group():
    result = run("run", "--help")
    assert result.returncode == 0
    for text in ("rollout:", "--rollout-batch-size", "--advantage-estimator", "--no-colocate", "--custom-rm-path"):
        assert text in result.stdout


def test_run_help_lists_the_options_a_user_sets_and_help_all_adds_the_compatibility_flags():
    """Megatron-LM's --num-layers and slime's --allgather-cp are accepted for launch scripts:
    only --help-all lists them, under their group; --help ends by pointing there."""
    short, full = run("run", "--help"), run("run", "--help-all")
    assert short.returncode == full.returncode == 0
    listed = [
        {line.split()[0].rstrip(",") for line in result.stdout.splitlines() if line.startswith("  --")}
        for result in (short, full)
    ]
    assert {"--rollout-batch-size", "--tensor-model-parallel-size", "--custom-rm-path"} <= listed[0] & listed[1]
    assert {"--num-layers", "--allgather-cp"} <= listed[1] - listed[0]
    for group in ("accepted Megatron-LM flags (", "accepted from slime's train.py ("):
        assert group not in short.stdout and group in full.stdout
    assert short.stdout.rstrip().splitlines()[-1].endswith("launch scripts.")
    assert "`slime run --help-all` also lists the" in short.stdout and "also lists" not in full.stdout


def test_plugins_lists_every_package_as_json():
    plugins = {p["name"]: p for p in json.loads(run("plugins").stdout)}
    assert {"core", "fsdp", "megatron", "sglang", "rewards", "router"} <= set(plugins)
    core = plugins["core"]
    assert (core["distribution"], core["version"]) == ("slime-core", "0.1.0")
    assert "slime_add_options" in core["hooks"]
    assert core["registers"]["data_sources"] == ["prompt"]
    assert plugins["fsdp"]["distribution"] == "slime-fsdp"


def test_dry_run_prints_config_and_components(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    result = run(
        "run",
        "--dry-run",
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        "m",
        "--rollout-batch-size",
        "2",
        "--n-samples-per-prompt",
        "4",
        "--sglang-mem-fraction-static",
        "0.5",
    )
    assert result.returncode == 0, result.stderr
    assert "global_batch_size: 8" in result.stdout
    assert "mem_fraction_static: '0.5'" in result.stdout
    assert "- data_source: prompt -> plugin 'core' (slime-core 0.1.0)" in result.stdout
    assert "- core: slime-core 0.1.0" in result.stdout


def test_bad_config_exits_2_with_every_error(tmp_path):
    result = run("run", "--rollout-batch-size", "two", "--lrr", "1e-5")
    assert result.returncode == 2
    for text in (
        "unknown option --lrr; did you mean --lr?",
        "expected an integer, got 'two'",
        "--prompt-data is required",
        "--hf-checkpoint is required",
    ):
        assert text in result.stderr


def test_a_broken_plugin_is_reported_not_a_traceback(tmp_path):
    (tmp_path / "broken_plug.py").write_text("raise RuntimeError('cannot start')\n")
    result = subprocess.run(
        [SLIME, "-p", "broken_plug", "plugins"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tmp_path), "PATH": ""},
        timeout=60,
    )
    assert result.returncode == 2
    assert "-p broken_plug" in result.stderr or "broken_plug" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_plugin_module_in_the_working_directory_loads_with_p(tmp_path):
    """`slime -p my_rewards ...` run in the folder that holds my_rewards.py finds it, as slime's
    `python train.py` finds modules beside it (a console script's path holds only its own folder)."""
    (tmp_path / "cwd_rewards_of_the_user.py").write_text(
        "from slime_core import hookimpl\n\n\n"
        "async def score(sample, **kwargs):\n    return 1.0\n\n\n"
        "@hookimpl\ndef slime_register_reward_functions(register):\n    register('from_the_cwd', score)\n"
    )
    result = run("-p", "cwd_rewards_of_the_user", "plugins", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    mine = [p for p in json.loads(result.stdout) if p["name"] == "cwd_rewards_of_the_user"]
    assert mine and "from_the_cwd" in json.dumps(mine[0])
