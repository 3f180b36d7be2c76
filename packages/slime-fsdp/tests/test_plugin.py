from slime_core.testing import check_plugin_installed


def test_found_through_its_entry_point_and_light_to_import():
    check_plugin_installed("fsdp", "slime-fsdp")


def test_a_ppo_critic_with_kl_coef_is_refused_by_the_dry_run_and_the_critic(tiny_model_dir, tmp_path, capsys):
    """The critic's ranks refuse --kl-coef (its returns carry no KL penalty): the dry run says so
    first, with the critic's own check (`critic_kl_problem`)."""
    import json
    from types import SimpleNamespace

    from slime_core.cli.run import run_command
    from slime_core.plugins import Plugins
    from slime_fsdp.plugin import critic_kl_problem

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    argv = ["--dry-run", "--train-backend", "fsdp", "--advantage-estimator", "ppo", "--kl-coef", "0.1"]
    argv += ["--prompt-data", str(prompts), "--hf-checkpoint", str(tiny_model_dir), "--rollout-batch-size", "2"]
    message = "the critic's returns have no KL penalty: set --kl-coef 0 (use --use-kl-loss instead)"
    assert run_command(argv, Plugins()) == 2
    assert message in capsys.readouterr().err
    assert critic_kl_problem(SimpleNamespace(advantage_estimator="ppo", kl_coef=0.1)) == message  # the critic's guard
    assert critic_kl_problem(SimpleNamespace(advantage_estimator="ppo", kl_coef=0.0)) is None


def test_lora_options_are_checked_by_the_dry_run(tiny_model_dir, tmp_path, capsys):
    """Out-of-range LoRA options and a Megatron --ref-load as the adapter's base are refused together;
    --lora-alpha without --lora-rank is said to have no effect."""
    import json

    from slime_core.cli.run import run_command
    from slime_core.plugins import Plugins

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    megatron = tmp_path / "megatron"
    megatron.mkdir()
    (megatron / "latest_checkpointed_iteration.txt").write_text("release")
    argv = [
        "--dry-run",
        "--train-backend",
        "fsdp",
        "--prompt-data",
        str(prompts),
        "--hf-checkpoint",
        str(tiny_model_dir),
    ]
    argv += ["--rollout-batch-size", "2", "--rollout-max-response-len", "8"]
    lora = ["--lora-rank", "8", "--lora-dropout", "1.5", "--ref-load", str(megatron)]
    assert run_command([*argv, *lora], Plugins()) == 2
    err = capsys.readouterr().err
    assert "--lora-dropout 1.5: a probability in [0, 1)" in err
    assert "a Megatron --ref-load cannot be the base" in err
    assert run_command([*argv, "--lora-alpha", "32"], Plugins()) == 0
    out = capsys.readouterr()
    assert "it scales the LoRA adapter (--lora-rank > 0)" in out.out + out.err
