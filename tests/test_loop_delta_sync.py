"""`slime run` with delta weight syncs (``--update-weight-mode delta``), xor and overwrite: the engines get
the trainer's weights through their host's local copy; the overwrite run is the CPU run of
``--true-on-policy-mode``, whose rollout and training log-probs are equal."""

import json

import pytest

pytestmark = pytest.mark.integration


def delta_flags(encoding: str, local) -> tuple[str, ...]:
    return (
        "--update-weight-mode",
        "delta",
        "--update-weight-delta-encoding",
        encoding,
        "--update-weight-local-checkpoint-dir",
        str(local),
        "--check-weight-update-equal",
    )


def assert_delta_synced(records, run_dir, local, encoding: str) -> None:
    """Version 1 full, version 2 the diff, both loaded intact (`--check-weight-update-equal`);
    the engine host's copy at version 2, version 1 deleted once pulled."""
    assert all(r["weight_update/max_logprob_diff"] < 1e-3 for r in records)
    first, second = records
    assert first["weight_update/bytes"] >= first["weight_update/full_bytes"]  # version 1 is full
    if encoding == "xor":  # overwrite costs 5 bytes per changed byte, and a step changes most float32 bytes
        assert second["weight_update/bytes"] < second["weight_update/full_bytes"]  # version 2 is the diff
    assert json.loads((local / "pulled_version.json").read_text())["version"] == "000002"
    published = run_dir / "weights"
    index = json.loads((published / "weight_v000002" / "model.safetensors.index.json").read_text())
    assert index["metadata"]["delta_encoding"] == encoding and index["metadata"]["compression_format"] == "zstd"
    assert [p.name for p in published.iterdir()] == ["weight_v000002"]


@pytest.mark.slow
def test_delta_weight_sync_gives_the_engines_the_trainers_weights(slime_run, tmp_path):
    """``--update-weight-mode delta``, xor: the first update is a full version, the second only
    the changed bytes, applied into the engine host's local copy, which the engine then loads
    (the overwrite encoding: the true on-policy run below)."""
    local = tmp_path / "engine-host-copy"
    records = slime_run("--num-rollout", "2", *delta_flags("xor", local))
    assert_delta_synced(records, tmp_path / "run", local, "xor")


@pytest.mark.slow
def test_true_on_policy_mode_makes_rollout_and_training_log_probs_equal(slime_run, tmp_path):
    """``--true-on-policy-mode``: the CPU engine decodes 64 samples together but reports each
    sequence's log-probs from a forward pass of it alone, and the FSDP trainer (two ranks) runs
    each sample alone: the same numbers, so the gap is 0, not float noise, and so is the first
    step's KL between the old and the current policy; after a weight update as well, which
    arrives here as an overwrite delta (so the second rollout's 0 also says it arrived bit for bit)."""
    local = tmp_path / "engine-host-copy"
    flags = ("--true-on-policy-mode", "--actor-num-gpus-per-node", "2", *delta_flags("overwrite", local))
    records = slime_run("--num-rollout", "2", *flags)
    assert [r["train/train_rollout_logprob_abs_diff"] for r in records] == [0.0, 0.0]
    assert records[0]["train/ppo_kl"] == 0.0
    assert_delta_synced(records, tmp_path / "run", local, "overwrite")
