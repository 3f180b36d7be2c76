import pytest

from slime_core.testing import check_plugin_installed


def test_found_through_its_entry_point_and_light_to_import():
    check_plugin_installed("sglang", "slime-sglang")


def test_an_in_process_run_that_would_start_engines_is_refused_before_it_starts(tmp_path, tiny_model_dir, capsys):
    """--actor-runtime inprocess runs without Ray; the backend's engines are Ray actors. The
    config check says so (before, the run failed once its start-up had begun); SFT, which
    starts no engine, runs in process."""
    import json

    from slime_core.cli.run import run_command
    from slime_core.plugins import Plugins

    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    argv = [
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--actor-runtime",
        "inprocess",
        "--rollout-engine",
        "cpu",
        "--rm-type",
        "exact_match",
        "--rollout-batch-size",
        "1",
        "--num-rollout",
        "1",
        "--rollout-max-response-len",
        "4",
        "--output-dir",
        str(tmp_path / "run"),
    ]
    assert run_command(argv, Plugins()) == 2
    assert (
        "--actor-runtime inprocess runs without Ray, and the sglang rollout backend starts its engines as Ray "
        "actors; use --actor-runtime ray, or give running engines with --rollout-external-engine-addrs"
    ) in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    sft = ["--rollout-function", "sft", "--loss-type", "sft_loss", "--dry-run"]
    assert run_command([*argv, *sft], Plugins()) == 0


def test_fault_tolerance_is_refused_for_engines_slime_did_not_start(tmp_path):
    """slime restarts only the engines it started, so --use-fault-tolerance and
    --rollout-external-engine-addrs exclude each other (whichever rollout backend)."""
    from slime_core.config import ConfigError, OptionSet, load_config
    from slime_core.plugins import Plugins

    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    plugins, options = Plugins(), OptionSet()
    plugins.add_options(options)
    argv = ["--prompt-data", str(data), "--hf-checkpoint", "m", "--rollout-batch-size", "1", "--use-fault-tolerance"]
    with pytest.raises(
        ConfigError, match="engines given by --rollout-external-engine-addrs are not slime's to restart"
    ):
        load_config([*argv, "--rollout-external-engine-addrs", "127.0.0.1:1"], options, plugins)
    assert load_config(argv, options, plugins).use_fault_tolerance
