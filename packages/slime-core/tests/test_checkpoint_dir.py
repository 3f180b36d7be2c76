"""Which checkpoint a run resumes from (the latest under ``--load``, or ``--ckpt-step``'s), how a
checkpoint reaches the disk before the pointer names it, and ``--save-retain-count``'s pruning."""

from pathlib import Path

import pytest

from slime_core.checkpoint.directory import (
    prepare,
    prune,
    publish,
    resume_checkpoint,
    role_dir,
    rollout_state_path,
    saved_rollouts,
    staging,
)
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
    assert str(error.value) == (
        f"--ckpt-step 3: {root} holds no iter_0000003 (it holds iter_0000000, iter_0000002); "
        "give the rollout of one of those, or leave out --ckpt-step to resume from the latest"
    )


def test_a_missing_ckpt_step_is_a_preflight_problem_and_a_negative_one_a_config_error(tmp_path, capsys):
    from slime_core.cli.run import run_command
    from slime_core.plugins import Plugins
    from slime_core.preflight import load_problems

    root = _saved(tmp_path / "ckpt", 0)
    assert load_problems(Config({"load": str(root), "ckpt_step": 0})) == []
    assert load_problems(Config({"load": str(root), "ckpt_step": 5})) == [
        f"--ckpt-step 5: {root} holds no iter_0000005 (it holds iter_0000000); give the rollout of one of those, "
        "or leave out --ckpt-step to resume from the latest"
    ]
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    argv = [
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tmp_path),
        "--rollout-batch-size",
        "2",
        "--dry-run",
        "--load",
        str(root),
        "--ckpt-step",
        "-1",
    ]
    assert run_command(argv, Plugins()) == 2
    assert "--ckpt-step must be a rollout id (0 or more), got -1" in capsys.readouterr().err


def test_retention_keeps_the_newest_and_the_resumed_one_and_deletes_every_role_of_the_others(tmp_path):
    """``--save-retain-count``'s pruning: the newest N complete checkpoints, each role's part
    (policy, critic, rollout state) deleted together; never the one protected (resumed from),
    a save in flight (``.tmp``) nor one newer than the pointer."""
    root = _saved(tmp_path / "ckpt", 0, 1, 2, 3)
    for rollout_id in range(4):
        (role_dir(root, "critic") / f"iter_{rollout_id:07d}").mkdir(parents=True)
        rollout_state_path(root, rollout_id).parent.mkdir(exist_ok=True)
        rollout_state_path(root, rollout_id).write_text("{}")
    (root / "iter_0000004").mkdir()  # written, not yet published: newer than the pointer
    (root / "iter_0000005.tmp").mkdir()
    assert prune(root, keep=2, protect=0) == [1]
    assert saved_rollouts(root) == [0, 2, 3, 4] and (root / "iter_0000005.tmp").is_dir()
    assert saved_rollouts(role_dir(root, "critic")) == [0, 2, 3]
    assert sorted(p.name for p in (root / "rollout_state").iterdir()) == [f"iter_{i:07d}.json" for i in (0, 2, 3)]
    assert prune(root, keep=1) == [0, 2] and saved_rollouts(root) == [3, 4]
    assert prune(_saved(tmp_path / "empty"), keep=1) == []


def test_a_checkpoint_reaches_the_disk_before_it_is_renamed_and_before_the_pointer_names_it(tmp_path, monkeypatch):
    """publish: every file and directory of the staged checkpoint is fsynced, then renamed, the
    parent directory fsynced, and only then the pointer written (itself fsynced and renamed, its
    directory fsynced). The order is recorded from the real calls (they still run)."""
    import os

    calls = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst):
        calls.append(("rename", str(src), str(dst)))
        real_replace(src, dst)

    root = tmp_path / "ckpt"
    final, tmp = staging(root, 3)
    prepare(tmp)
    (tmp / "rank_0.pt").write_bytes(b"x")
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    publish(tmp, final, 3)
    pointer = root / "latest_checkpointed_iteration.txt"
    assert calls == [
        ("fsync", str(tmp / "rank_0.pt")),
        ("fsync", str(tmp)),
        ("rename", str(tmp), str(final)),
        ("fsync", str(root)),
        ("fsync", f"{pointer}.tmp"),
        ("rename", f"{pointer}.tmp", str(pointer)),
        ("fsync", str(root)),
    ]
    assert pointer.read_text() == "3"


def test_a_ppo_resume_from_a_checkpoint_without_its_critic_is_refused_before_anything_starts(tmp_path):
    """A PPO ``--load`` whose checkpoint has no ``critic/`` part (written without PPO, or by an
    earlier slime whose critic overwrote the policy) is a preflight problem saying so."""
    from slime_core.preflight import load_problems

    root = _saved(tmp_path / "ckpt", 0)
    problems = load_problems(Config({"load": str(root), "advantage_estimator": "ppo"}))
    assert (
        len(problems) == 1
        and f"the checkpoint iter_0000000 has no critic ({root / 'critic' / 'iter_0000000'})" in problems[0]
    )
    assert load_problems(Config({"load": str(root), "advantage_estimator": "grpo"})) == []
    (role_dir(root, "critic") / "iter_0000000").mkdir(parents=True)
    assert load_problems(Config({"load": str(root), "advantage_estimator": "ppo"})) == []


def _confirm_rank(rank: int, world_size: int, port: int, tmp: str, failing_rank: int | None):
    """One rank of `confirm_written` whose own write failed when it is ``failing_rank``; what it raised."""
    import torch.distributed as dist

    from slime_core.checkpoint.directory import confirm_written

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        confirm_written(Path(tmp), OSError(28, "No space left on device") if rank == failing_rank else None)
        return None
    except Exception as exc:  # noqa: BLE001 - the result is what each rank raised
        return str(exc)
    finally:
        dist.destroy_process_group()


def test_a_write_that_failed_on_one_rank_stops_every_rank_and_deletes_the_partial_checkpoint(rank_pool, tmp_path):
    """A rank whose own write worked learns that another's did not (it does not wait forever
    for it at a barrier); rank 0 deletes the partial ``.tmp``. All written: nothing happens."""
    final, tmp = staging(tmp_path / "ckpt", 2)
    prepare(tmp)
    assert rank_pool.run((__file__, "_confirm_rank"), 2, str(tmp), None) == [None, None] and tmp.is_dir()
    raised = rank_pool.run((__file__, "_confirm_rank"), 2, str(tmp), 1)
    assert raised == [
        f"writing {tmp} failed on rank(s) [1] (each rank's log says why); the partial checkpoint was deleted",
        "[Errno 28] No space left on device",
    ]
    assert not tmp.exists() and not final.exists()
