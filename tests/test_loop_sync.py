"""`slime run` end to end on CPU, synchronous and colocated: FSDP train ranks and CPU engines as Ray
actors, the real sglang-router, weight updates every rollout, and a reward the tiny model learns in a few steps;
the run directory it fills."""

import json

import pytest

pytestmark = pytest.mark.integration


def test_sync_colocated_run_learns_and_fills_its_run_directory(slime_run, tmp_path, improved):
    eval_data = tmp_path / "eval.jsonl"
    eval_data.write_text("".join(json.dumps({"prompt": f"{a}+1=", "label": str(a + 1)}) + "\n" for a in range(6)))
    records = slime_run(
        "--num-rollout",
        "6",
        "--colocate",
        "--check-weight-update-equal",
        "--dump-rollouts",
        "--eval-prompt-data",
        "small",
        str(eval_data),
        "--eval-interval",
        "3",
    )
    assert [r["rollout_id"] for r in records] == list(range(6))
    assert improved(records), [r["rollout/reward_mean"] for r in records]
    last = records[-1]
    assert last["weight_version"] == 6 and last["weight_update/bytes"] > 0
    assert last["weight_update/max_logprob_diff"] < 1e-3  # the engines got exactly the trainer's weights
    assert last["train/train_rollout_logprob_abs_diff"] < 1e-3
    assert {"eval/small/reward_mean", "time/eval"} <= set(records[2]) and "eval/small/reward_mean" not in records[3]
    run_dir = tmp_path / "run"
    assert "rollout_batch_size: 8" in (run_dir / "config.yaml").read_text()
    plugins = {p["distribution"] for p in json.loads((run_dir / "plugins.json").read_text())}
    assert {"slime-core", "slime-fsdp", "slime-sglang", "slime-router"} <= plugins
    dumped = [json.loads(line) for line in (run_dir / "rollouts" / "rollout_000005.jsonl").read_text().splitlines()]
    assert len(dumped) == 64 and all(len(s["loss_mask"]) == s["response_length"] for s in dumped)
    assert sum(s["reward"] for s in dumped) / 64 == pytest.approx(last["rollout/reward_mean"])
    log = (run_dir / "slime.log").read_text()
    assert "[rollout 6/6]" in log and "placement: 1 bundles (1 training ranks, engines sharing" in log
