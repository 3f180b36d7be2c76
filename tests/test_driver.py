"""The real driver (`slime run`) with fake train and rollout backends and a fake router, all
registered through the public hooks (`slime_core.testing.fakes`, run by the test kit's ``fake_run``
fixture) in this process without Ray: sync, async with staleness, colocated, eval, save / resume,
Ctrl-C and engine failure."""

import json

import pytest

from slime_core import hookimpl
from slime_core.loop.run_dir import read_metrics
from slime_core.plugins import PluginError
from slime_core.testing import Recorder


def test_sync_run_uses_every_selected_part_and_learns(fake_run):
    records = fake_run("--num-rollout", "6", "--check-weight-update-equal")
    assert [r["rollout_id"] for r in records] == list(range(6))
    rewards = [r["rollout/reward_mean"] for r in records]
    assert sum(rewards[-2:]) > sum(rewards[:2]), rewards  # REINFORCE on θ through the whole loop
    (rank,) = Recorder.ranks
    engine = Recorder.engines["fake://engine-0"]
    assert engine.version == "6" and engine.theta == rank.theta  # every push arrived through the contract
    assert all(r["weight_update/max_logprob_diff"] < 1e-9 for r in records)
    calls = Recorder.calls
    assert calls["backend.start"] == 1 and calls["router.start"] == 1 and calls["rank.train"] == 6
    assert calls["engine.pause"] == calls["engine.resume_generation"] == calls["engine.update_weights_from_tensor"] == 6
    assert engine.requests == 6 * 4 + 6  # a group per request through the fake router, and each update's probe
    assert records[-1]["router/fake_workers"] == 1  # the router's metrics reach the log
    # every part is stopped at the end
    assert calls["engine.shutdown"] == calls["router.stop"] == 1 and calls["engine.close_weight_updates"] >= 1
    log = (fake_run.tmp_path / "run" / "slime.log").read_text()
    assert "placement: in process (1 training rank, no Ray)" in log


def test_train_step_hooks_fire_around_every_optimizer_step(fake_run):
    steps = []

    class Hooks:
        @staticmethod
        @hookimpl
        def slime_before_train_step(rollout_id, step):
            steps.append(("before", rollout_id, step, Recorder.ranks[0].theta))

        @staticmethod
        @hookimpl
        def slime_after_train_step(rollout_id, step, metrics):
            steps.append(("after", rollout_id, step, metrics["theta"]))

    records = fake_run("--num-rollout", "2", "--num-steps-per-rollout", "2", hooks=[Hooks])
    assert [s[:3] for s in steps] == [(w, r, k) for r in range(2) for k in range(2) for w in ("before", "after")]
    # each "after" sees its own step's update, and the next "before" starts from it
    assert steps[1][3] == steps[2][3] != steps[0][3]
    assert records[-1]["train/samples"] == 16


def test_router_none_sends_generation_to_the_engines_in_turn(fake_run):
    fake_run("--num-rollout", "2", "--router", "none", "--rollout-num-gpus", "2")
    assert "router.start" not in Recorder.calls
    first, second = Recorder.engines["fake://engine-0"], Recorder.engines["fake://engine-1"]
    assert first.requests == second.requests == 4  # 8 group requests, alternating
    assert first.version == second.version == "2"


def test_async_run_trains_on_one_version_old_samples_and_drops_beyond_the_bound(fake_run):
    records = fake_run("--num-rollout", "4", "--train-mode", "async", "--fake-train-seconds", "0.2")
    # rollout k+1 is generated while rollout k trains, on the weights before that step
    assert [r["rollout/staleness_max"] for r in records] == [0, 1, 1, 1]
    assert all("time/wait_rollout" in r for r in records)
    dropped = fake_run(
        "--num-rollout",
        "3",
        "--train-mode",
        "async",
        "--max-staleness",
        "0",
        "--fake-train-seconds",
        "0.2",
        output="strict",
    )
    # rollout 1 was generated before rollout 0's update: dropped whole, nothing to train on; so
    # rollout 2, generated while that empty step ran, is on current weights again
    assert [r["rollout/stale_groups_dropped"] for r in dropped] == [0, 4, 0]
    assert Recorder.calls["rank.train"] == 2


def test_colocated_run_takes_turns(fake_run):
    class Check:
        @staticmethod
        @hookimpl
        def slime_before_train_step(rollout_id, step):
            engine, (rank,) = Recorder.engines["fake://engine-0"], Recorder.ranks
            assert not engine.resident and rank.resident  # engines released their memory for training

    records = fake_run("--num-rollout", "3", "--colocate", hooks=[Check])
    calls = Recorder.calls
    assert calls["engine.release_memory"] == calls["engine.resume_memory"] == 3
    # resident at start; offloaded for each rollout's generation and weight push, back for training
    assert calls["rank.offload"] == 4 and calls["rank.onload"] == 3
    assert len(records) == 3


def test_eval_runs_through_the_eval_function_on_the_engines(fake_run):
    eval_data = fake_run.tmp_path / "eval.jsonl"
    eval_data.write_text("".join(json.dumps({"prompt": f"{a}+1=", "label": str(a + 1)}) + "\n" for a in range(5)))
    records = fake_run("--num-rollout", "4", "--eval-prompt-data", "small", str(eval_data), "--eval-interval", "2")
    evaluated = [r["rollout_id"] for r in records if "eval/small/reward_mean" in r]
    assert evaluated == [1, 3]
    before = [r for r in read_metrics(fake_run.tmp_path / "run" / "metrics.jsonl") if r["rollout_id"] == -1]
    assert before and 0 <= before[0]["eval/small/reward_mean"] <= 1


def test_resume_continues_exactly_where_the_checkpoint_left(fake_run):
    whole = fake_run("--num-rollout", "4", output="whole")
    save = str(fake_run.tmp_path / "ckpt")
    fake_run("--num-rollout", "2", "--save", save, "--save-interval", "2", output="first")
    resumed = fake_run("--num-rollout", "4", "--load", save, output="resumed")
    assert [r["rollout_id"] for r in resumed] == [2, 3]
    # same prompts, same samples, same θ: the data source and the weights came back
    assert [r["train/theta"] for r in resumed] == [r["train/theta"] for r in whole[2:]]
    assert [r["rollout/reward_mean"] for r in resumed] == [r["rollout/reward_mean"] for r in whole[2:]]
    assert Recorder.engines["fake://engine-0"].version == "4"


def test_ctrl_c_stops_every_part_and_marks_the_run_interrupted(fake_run):
    class Interrupt:
        @staticmethod
        @hookimpl
        def slime_after_train_step(rollout_id, step, metrics):
            if rollout_id == 1:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fake_run("--num-rollout", "5", hooks=[Interrupt])
    calls = Recorder.calls
    assert calls["rank.train"] == 2 and calls["engine.shutdown"] == 1 and calls["router.stop"] == 1
    assert calls["client.close"] >= 1
    status = json.loads((fake_run.tmp_path / "run" / "status.json").read_text())
    assert status["status"] == "interrupted"


def test_a_dead_engine_is_replaced_and_no_sample_is_lost(fake_run):
    class Kill:
        @staticmethod
        @hookimpl
        def slime_before_rollout(rollout_id, config):
            if rollout_id == 1:
                Recorder.engines["fake://engine-0"].alive = False

    records = fake_run(
        "--num-rollout",
        "3",
        "--use-fault-tolerance",
        "--rollout-health-check-interval",
        "0.05",
        "--generate-max-retries",
        "8",
        hooks=[Kill],
    )
    assert sum(r["fault/engine_restarts"] for r in records) == 1
    assert all(r["train/samples"] == 16 for r in records)
    calls = Recorder.calls
    assert calls["engine.restart"] == 1 and calls["router.remove_worker"] == 1
    assert calls["router.add_worker"] == 2  # the engine at start-up (the router starts empty), then its replacement
    (rank,) = Recorder.ranks
    replacement = Recorder.engines["fake://engine-1"]
    assert replacement.alive and replacement.stopped and replacement.version == "3" and replacement.theta == rank.theta
    assert sum(r["rollout/samples_regenerated"] for r in records) > 0


def test_ppo_with_a_train_backend_without_a_critic_is_refused_before_anything_starts(fake_run, capsys):
    """Critics are registered by the train backend that provides one (slime-fsdp: ``fsdp``);
    the fake backend and Megatron provide none, so PPO stops at the config check."""
    fake_run("--num-rollout", "1", "--advantage-estimator", "ppo", exit_code=2)
    error = capsys.readouterr().err
    assert "--advantage-estimator ppo needs a critic, and train backend 'fake' provides none" in error
    assert "(train backends with a critic: fsdp)" in error
    assert not Recorder.calls and not (fake_run.tmp_path / "run").exists()  # nothing started


def test_weights_that_are_not_finite_are_never_saved(fake_run, capsys):
    """The driver asks the ranks before a checkpoint (here before any weight update: async,
    every second rollout): an infinite learning rate makes θ non-finite, the save is refused
    with the parameter's name, nothing is written, and `slime run` exits with 1."""
    fake_run(
        "--num-rollout",
        "2",
        "--async",
        "--update-weights-interval",
        "2",
        "--lr",
        "inf",
        "--save-interval",
        "1",
        exit_code=1,
    )
    err = capsys.readouterr().err
    assert (
        "refusing to save the checkpoint of rollout 0: 1 of the trainer's parameters hold NaN or infinite "
        "values (theta)" in err
    )
    ckpt = fake_run.tmp_path / "run" / "checkpoints"
    assert not list(ckpt.glob("iter_*")) and not list(ckpt.glob("rollout_state/*"))
    assert json.loads((fake_run.tmp_path / "run" / "status.json").read_text())["status"] == "failed"


def test_every_part_reads_the_checked_config_and_the_run_facts_come_in_its_copy(fake_run):
    """The config is frozen once checked: a hook that assigns to it stops the run with an error
    naming the plugin, the key and the fix. The run's facts reach the parts in the copy they are given: the
    run directory, the checkpoint directory --save-interval defaults to, the run's token."""
    seen = {}

    class Hooks:
        @staticmethod
        @hookimpl
        def slime_before_rollout(rollout_id, config):
            seen.update(output_dir=config.output_dir, save=config.save, token=config.network.token)
            config.num_rollout = 99

    frozen = (
        r"'driver_test_hooks_0' .* FrozenConfigError: config\.num_rollout cannot be set: .*slime_resolve_config hook"
    )
    with pytest.raises(PluginError, match=frozen):
        fake_run("--num-rollout", "2", "--save-interval", "1", hooks=[Hooks])
    run = fake_run.tmp_path / "run"
    assert (seen["output_dir"], seen["save"]) == (str(run), str(run / "checkpoints")) and seen["token"]
    fake_run("--num-rollout", "1", "--save-interval", "1", output="saved")
    assert list((fake_run.tmp_path / "saved" / "checkpoints").glob("iter_*"))
