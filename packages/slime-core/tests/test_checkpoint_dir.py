"""Which checkpoint a run resumes from: the latest under ``--load``, or ``--ckpt-step``'s."""

import pytest

from slime_core.checkpoint_dir import prepare, publish, resume_checkpoint, staging
from slime_core.config import Config


def _saved(root, *rollout_ids):
    """``root`` with a published checkpoint after each of ``rollout_ids`` (the last is the latest)."""
    root.mkdir()
    for rollout_id in rollout_ids:
        final, tmp = staging(root, rollout_id)
        prepare(tmp)
        publish(tmp, final, rollout_id)
    return root


def test_the_latest_checkpoint_unless_ckpt_step_names_another(tmp_path):
    root = _saved(tmp_path / "ckpt", 0, 1, 2)
    assert resume_checkpoint(Config({"load": str(root)})) == root / "iter_0000002"
    assert resume_checkpoint(Config({"load": str(root), "ckpt_step": 0})) == root / "iter_0000000"
    assert resume_checkpoint(Config({"load": None, "ckpt_step": 0})) is None  # no --load: a fresh start
    assert resume_checkpoint(Config({"load": str(_saved(tmp_path / "empty"))})) is None


def test_a_ckpt_step_the_directory_does_not_hold_names_the_ones_it_does(tmp_path):
    root = _saved(tmp_path / "ckpt", 0, 2)
    (root / "iter_0000003.tmp").mkdir()  # a save cut short: not a checkpoint
    with pytest.raises(FileNotFoundError) as error:
        resume_checkpoint(Config({"load": str(root), "ckpt_step": 3}))
    assert str(error.value) == (f"--ckpt-step 3: {root} holds no iter_0000003 (it holds iter_0000000, iter_0000002); "
                                "give the rollout of one of those, or leave out --ckpt-step to resume from the latest")


def test_a_missing_ckpt_step_is_a_preflight_problem_and_a_negative_one_a_config_error(tmp_path, capsys):
    from slime_core.cli.run import run_command
    from slime_core.plugins import Plugins
    from slime_core.preflight import load_problems

    root = _saved(tmp_path / "ckpt", 0)
    assert load_problems(Config({"load": str(root), "ckpt_step": 0})) == []
    assert load_problems(Config({"load": str(root), "ckpt_step": 5})) == [
        f"--ckpt-step 5: {root} holds no iter_0000005 (it holds iter_0000000); give the rollout of one of those, "
        "or leave out --ckpt-step to resume from the latest"]
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    argv = ["--prompt-data", str(data), "--hf-checkpoint", str(tmp_path), "--rollout-batch-size", "2", "--dry-run",
            "--load", str(root), "--ckpt-step", "-1"]
    assert run_command(argv, Plugins()) == 2
    assert "--ckpt-step must be a rollout id (0 or more), got -1" in capsys.readouterr().err
