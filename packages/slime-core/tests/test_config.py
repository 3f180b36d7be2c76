import pickle

import pytest

from slime_core.config import ConfigError, FrozenConfigError, OptionSet, load_config


@pytest.fixture
def data(write_jsonl):
    return str(write_jsonl([{"prompt": "1+1=", "label": "2"}]))


@pytest.fixture
def base(data):
    return ["--prompt-data", data, "--hf-checkpoint", "model", "--rollout-batch-size", "4"]


def errors_of(argv, options, plugins=None):
    with pytest.raises(ConfigError) as info:
        load_config(argv, options, plugins)
    return info.value.errors


def write_yaml(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return str(path)


def test_yaml_then_command_line_overrides(tmp_path, options, data):
    path = write_yaml(
        tmp_path, f"prompt_data: {data}\nhf-checkpoint: m\nrollout_batch_size: 8\nlr: 1.0e-5\ncolocate: true\n"
    )
    config = load_config([path, "--lr", "3e-4", "--no-colocate", "--n-samples-per-prompt", "2"], options)
    assert config.rollout_batch_size == 8 and config.hf_checkpoint == "m"
    assert config.lr == 3e-4 and config.colocate is False and config.n_samples_per_prompt == 2
    assert config.sources["rollout_batch_size"] == f"{path}:3"
    assert config.sources["lr"] == "command line" and config.sources["seed"] == "default"


def test_yaml_scientific_notation_without_dot_is_a_number(tmp_path, options, data):
    path = write_yaml(tmp_path, f"prompt_data: {data}\nhf_checkpoint: m\nrollout_batch_size: 8\nlr: 1e-6\n")
    assert load_config([path], options).lr == 1e-6


def test_a_yaml_mapping_for_a_json_text_option_is_its_json(tmp_path, options, data):
    """``apply_chat_template_kwargs: {enable_thinking: false}`` in YAML means the JSON object the
    flag takes on the command line, not Python's repr of the mapping."""
    path = write_yaml(
        tmp_path,
        f"prompt_data: {data}\nhf_checkpoint: m\nrollout_batch_size: 8\n"
        "apply_chat_template_kwargs: {enable_thinking: false}\n",
    )
    assert load_config([path], options).apply_chat_template_kwargs == '{"enable_thinking": false}'


def test_every_error_is_reported_together(tmp_path, options, data):
    path = write_yaml(tmp_path, f"prompt_data: {data}\nrollout_batch_sise: 8\nlr: fast\n")
    errors = errors_of([path, "--n-samples-per-prompt", "x", "--colocat"], options)
    text = "\n".join(errors)
    assert f"{path}:2: unknown key 'rollout_batch_sise'; did you mean rollout_batch_size?" in text
    assert f"{path}:3: lr: expected a number, got 'fast'" in text
    assert "command line: n_samples_per_prompt: expected an integer, got 'x'" in text
    assert "unknown option --colocat; did you mean --colocate?" in text
    assert "--hf-checkpoint is required" in text
    assert len(errors) >= 5


def test_a_nan_failure_reward_and_a_skip_limit_below_one_are_refused(options, base):
    errors = errors_of(base + ["--rm-failure-reward", "nan", "--max-consecutive-skipped-steps", "0"], options)
    assert errors == [
        "--rm-failure-reward nan: failed samples would be trained on a non-finite reward; give a finite number",
        "--max-consecutive-skipped-steps must be at least 1, got 0",
    ]
    checked = load_config(base, options)
    assert checked.check_for_nan_in_loss_and_grad is True and checked.drop_nonfinite_rewards is False
    assert load_config(base + ["--no-check-for-nan-in-loss-and-grad"], options).check_for_nan_in_loss_and_grad is False


def test_choices_suggest_the_nearest(options, base):
    (error,) = errors_of(base + ["--kl-loss-type", "low_var"], options)
    assert "'low_var' is not one of k1, k2, k3, low_var_kl; did you mean 'low_var_kl'?" in error


def test_batch_constraint_shows_the_numbers(options, base):
    (error,) = errors_of(
        base + ["--n-samples-per-prompt", "8", "--global-batch-size", "16", "--num-steps-per-rollout", "3"], options
    )
    assert "rollout_batch_size × n_samples_per_prompt = 4 × 8 = 32 samples per rollout" in error
    assert "global_batch_size × num_steps_per_rollout = 16 × 3 = 48" in error
    assert "--num-steps-per-rollout 2" in error


@pytest.mark.parametrize(
    "extra, gb, steps",
    [([], 32, 1), (["--global-batch-size", "8"], 8, 4), (["--num-steps-per-rollout", "2"], 16, 2)],
)
def test_batch_sizes_are_derived(options, base, extra, gb, steps):
    config = load_config(base + ["--n-samples-per-prompt", "8"] + extra, options)
    assert (config.global_batch_size, config.num_steps_per_rollout) == (gb, steps)


def test_global_batch_must_divide(options, base):
    (error,) = errors_of(base + ["--n-samples-per-prompt", "3", "--global-batch-size", "5"], options)
    assert "12 samples per rollout, which is not a multiple of --global-batch-size 5" in error


def test_sglang_and_router_flags_pass_through(tmp_path, options, base):
    path = write_yaml(tmp_path, "sglang:\n  mem-fraction-static: 0.7\nrouter_policy: cache_aware\n")
    config = load_config(
        [path, *base, "--sglang-enable-torch-compile", "--sglang-tp-size", "2", "--router-balance-abs-threshold", "4"],
        options,
    )
    assert config.sglang == {"mem_fraction_static": 0.7, "enable_torch_compile": True, "tp_size": "2"}
    assert config.router_args == {"policy": "cache_aware", "balance_abs_threshold": "4"}
    assert config.to_dict()["sglang"]["tp_size"] == "2"


def test_list_options_and_missing_data_files(options, base, data):
    config = load_config(base + ["--eval-prompt-data", "a", data, "b", data], options)
    assert config.eval_prompt_data == ["a", data, "b", data]
    errors = errors_of(base + ["--eval-prompt-data", "a", "nope.jsonl", "b"], options)
    assert any("NAME PATH pairs, got 3 values" in e for e in errors)
    (missing,) = errors_of(
        ["--prompt-data", "absent.jsonl@[0:5]", "--hf-checkpoint", "m", "--rollout-batch-size", "1"], options
    )
    assert "data file 'absent.jsonl' does not exist" in missing


def test_switches_take_no_value_and_values_are_needed(options, base):
    errors = errors_of(base + ["--colocate=yes", "--lr"], options)
    assert "--colocate is a switch and takes no value; write --colocate or --no-colocate" in errors
    assert "--lr needs a value" in errors


def test_invalid_yaml_names_the_line(tmp_path, options):
    path = write_yaml(tmp_path, "lr: 1\nrollout_batch_size: [1,\n")
    errors = errors_of([path], options)
    assert any(e.startswith(f"{path}:3: not valid YAML") for e in errors), errors


def test_config_access_suggests_and_pickles(options, base):
    config = load_config(base, options)
    with pytest.raises(AttributeError, match="did you mean 'rollout_batch_size'"):
        _ = config.rollout_batchsize
    with pytest.raises(AttributeError, match="declare it with the slime_add_options hook"):
        config.new_option = 1
    restored = pickle.loads(pickle.dumps(config))
    assert restored.to_dict() == config.to_dict()


def test_declaring_an_option_twice_names_both_plugins():
    options = OptionSet()
    options.current_plugin = "first"
    options.add("--my-flag", type=int)
    options.current_plugin = "second"
    with pytest.raises(ValueError, match="--my-flag is declared twice: by plugin 'first' and by plugin 'second'"):
        options.add("--my-flag", type=int)


def test_options_set_but_without_effect_are_warned_about_by_name_and_reason(tmp_path, capsys):
    """An option the user set that changes nothing here is printed as a warning (never
    ignored in silence); defaults and options that act are not."""
    from slime_core.cli.run import run_command
    from slime_core.plugins import Plugins

    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    argv = [
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tmp_path),
        "--rollout-batch-size",
        "2",
        "--num-rollout",
        "1",
        "--dry-run",
        "--max-staleness",
        "1",
        "--tis-clip",
        "3",
        "--use-kl-loss",
        "--kl-loss-coef",
        "0.1",
        "--mask-offpolicy-in-partial-rollout",
        "--ckpt-step",
        "3",
    ]
    assert run_command(argv, Plugins()) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("slime run: warning:")]
    assert warnings == [
        "slime run: warning: --max-staleness has no effect here: only asynchronous runs train on samples from older "
        "weights (--train-mode async)",
        "slime run: warning: --mask-offpolicy-in-partial-rollout has no effect here: it masks what --partial-rollout "
        "continues",
        "slime run: warning: --ckpt-step has no effect here: it picks the checkpoint under --load that the run resumes "
        "from",
        "slime run: warning: --tis-clip has no effect here: the rollout/train mismatch weights are computed with "
        "--use-tis (or reported with --get-mismatch-metrics)",
    ]  # --kl-loss-coef acts (--use-kl-loss is on); defaults are not reported


def test_a_resolved_config_is_frozen_and_says_where_to_resolve_instead(options, base):
    config = load_config(base + ["--lr", "3e-4"], options)
    for frozen in (config, pickle.loads(pickle.dumps(config))):  # as a Ray actor or a rank process gets it
        with pytest.raises(FrozenConfigError, match=r"config\.lr cannot be set: .*slime_resolve_config hook"):
            frozen.lr = 1e-3
        assert frozen.lr == 3e-4
    changed = config.replace(lr=1e-3)
    assert (changed.lr, config.lr) == (1e-3, 3e-4)
    with pytest.raises(FrozenConfigError, match=r"config\.seed cannot be set"):
        changed.seed = 2
