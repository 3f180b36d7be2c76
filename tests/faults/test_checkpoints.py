"""Faults and hostile input around checkpoints, on the route of `slime run` (Ray, the router,
CPU engines, FSDP train ranks): a PPO run (packed micro-batches) saves every role in its own
place and resumes bit for bit; a checkpoint write the operating system refuses stops the run
with a message and loses nothing already saved; a checkpoint carrying a pickled payload is
refused, naming the file and the type, and the payload never runs. `slime_run` (tests/conftest.py)
runs `slime run` on this session's Ray with the tiny model."""

import os
import pickle
import resource

import pytest

from slime_core import hookimpl
from slime_core.testing import PicklePayload, command_line, descendants

pytestmark = pytest.mark.integration


def test_ppo_with_packing_keeps_each_roles_checkpoint_and_resumes_bit_for_bit(slime_run, tmp_path):
    """PPO on FSDP with packed micro-batches (the slime_run flags: --use-dynamic-batch-size)
    trains its critic; each checkpoint holds the policy at the top level, the critic under
    ``critic/`` and the driver's state under ``rollout_state/``, so a run resumed from the first
    checkpoint trains rollout 1 exactly as the whole run did, critic included."""
    ckpt = tmp_path / "ckpt"
    flags = ("--advantage-estimator", "ppo", "--update-weight-transport", "disk", "--num-steps-per-rollout", "2")
    whole = slime_run("--num-rollout", "2", "--save-interval", "1", "--save", str(ckpt), *flags, output="whole")
    for rollout_id in (0, 1):
        assert _stored_keys(ckpt / f"iter_{rollout_id:07d}") >= {"model.model.embed_tokens.weight"}
        assert "model.value_head.weight" in _stored_keys(ckpt / "critic" / f"iter_{rollout_id:07d}")
        assert (ckpt / "rollout_state" / f"iter_{rollout_id:07d}.json").is_file()
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "1"
    resumed = slime_run("--num-rollout", "2", "--load", str(ckpt), "--ckpt-step", "0", *flags, output="resumed")
    assert [r["rollout_id"] for r in resumed] == [1]
    engine_side = "train/train_rollout_logprob_abs_diff"  # varies at 1e-8 with the CPU engine's batching
    learned = [
        key for key in whole[1] if key.startswith(("train/", "critic/", "rollout/reward")) and key != engine_side
    ]
    assert {"critic/value_loss", "train/grad_norm"} <= set(learned)
    assert {key: resumed[0][key] for key in learned} == {key: whole[1][key] for key in learned}


def _stored_keys(checkpoint) -> set[str]:
    from torch.distributed.checkpoint import FileSystemReader

    return set(FileSystemReader(str(checkpoint)).read_metadata().state_dict_metadata)


class _DiskRefusesRankWrites:
    """After the save of rollout 1, the train rank's process may no longer write a file larger
    than half the biggest file of that checkpoint (RLIMIT_FSIZE, set from outside with
    prlimit): the operating system refuses its next shard write (EFBIG), as a full disk does
    (ENOSPC). A limit works where file permissions do not: tests may run as root."""

    @staticmethod
    @hookimpl
    def slime_after_save(rollout_id, path):
        if rollout_id != 1:
            return
        checkpoint = os.path.join(path, f"iter_{rollout_id:07d}")
        limit = max(os.path.getsize(os.path.join(checkpoint, name)) for name in os.listdir(checkpoint)) // 2
        ranks = [pid for pid in descendants(os.getpid()) if "RankProcess" in command_line(pid)]
        assert ranks, "no train rank process found"
        for pid in ranks:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))


def test_a_checkpoint_write_the_disk_refuses_stops_the_run_and_loses_nothing_saved(slime_run, tmp_path, capsys):
    """With --save-retain-count 1, rollout 1's checkpoint replaces rollout 0's; rollout 2's
    save is refused by the OS. The run exits 1 naming the error and the checkpoint left intact
    (rollout 1's, still the latest), and the partial files of the refused save are deleted; a
    run resumed from it trains rollout 2, and its own retention keeps the checkpoint it resumed from."""
    ckpt = tmp_path / "ckpt"
    flags = ["--save", str(ckpt), "--save-interval", "1", "--save-retain-count", "1", "--num-rollout", "3"]
    refused = slime_run(*flags, output="refused", hooks=[_DiskRefusesRankWrites], exit_code=1)
    error = capsys.readouterr().err
    assert f"saving the checkpoint of rollout 2 under {ckpt} failed" in error, error
    assert f"writing {ckpt / 'iter_0000002.tmp'} failed on rank(s) [0]: " in error
    assert "the disk is full or refused the write" in error
    assert f"the latest complete checkpoint, {ckpt / 'iter_0000001'}, is intact" in error
    assert "Traceback" not in error
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "1"
    assert sorted(p.name for p in ckpt.glob("iter_*")) == ["iter_0000001"]  # 0 pruned, 2's partial files deleted
    assert [r["rollout_id"] for r in refused] == [0, 1]
    resumed = slime_run(*flags, "--load", str(ckpt), output="resumed")
    assert [r["rollout_id"] for r in resumed] == [2]
    assert sorted(p.name for p in ckpt.glob("iter_*")) == ["iter_0000001", "iter_0000002"]  # resumed from 1: kept


def _with_payload(checkpoint, where: str, marker) -> str:
    """Put the payload into the checkpoint's DCP ``.metadata`` or its rank extras; the file."""
    import torch

    if where == ".metadata":
        metadata = pickle.loads((checkpoint / ".metadata").read_bytes())
        metadata.planner_data = PicklePayload(marker)
        (checkpoint / ".metadata").write_bytes(pickle.dumps(metadata))
    else:
        extras = torch.load(checkpoint / where, weights_only=True)
        extras["scheduler"]["last_epoch"] = PicklePayload(marker)
        torch.save(extras, checkpoint / where)
    return str(checkpoint / where)


@pytest.mark.parametrize("where", [".metadata", "rank_0.pt"])
def test_a_checkpoint_carrying_a_pickled_payload_is_refused_and_nothing_runs(tmp_path, slime_run, capsys, where):
    """A checkpoint written by the FSDP backend, then given a payload in the distributed
    checkpoint's metadata or in the rank's extras: `slime run --load` exits 1 naming the file
    and the type, and the payload never ran."""
    ckpt, marker = tmp_path / "ckpt", tmp_path / "payload-ran"
    _fsdp_checkpoint(slime_run, ckpt)
    path = _with_payload(ckpt / "iter_0000000", where, marker)
    try:
        slime_run("--load", str(ckpt), "--num-rollout", "2", exit_code=1)
    finally:
        assert not marker.exists(), "the payload ran"
    error = capsys.readouterr().err
    assert f"{path}: refused to load it: it names posix.system" in error, error
    assert "Traceback" not in error


def _fsdp_checkpoint(slime_run, ckpt) -> None:
    """The checkpoint of rollout 0 as the FSDP backend's save writes it (one rank, in this process)."""
    from slime_core.testing import destroy_default_group, make_config, synthetic_rollout_batch
    from slime_core.train_backend import TrainGroup
    from slime_fsdp.rank import FSDPTrainRank

    model = slime_run.base[slime_run.base.index("--hf-checkpoint") + 1]
    prompts = slime_run.base[slime_run.base.index("--prompt-data") + 1]
    config = make_config(
        prompts,
        model,
        train_backend="fsdp",
        rollout_batch_size=4,
        n_samples_per_prompt=4,
        rollout_max_response_len=8,
        save=str(ckpt),
    )
    try:
        group = TrainGroup(FSDPTrainRank, config, 1, in_process=True)
        group.init()
        group.train(0, synthetic_rollout_batch(seed=0))
        group.save(0)
    finally:
        destroy_default_group()
