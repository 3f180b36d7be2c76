"""slime's loss options act through `slime run` (FSDP, one train rank, CPU engine): the
mismatch metrics are reported, OPSM drops tokens, the PPO ratio is anchored on the engine's
log-probs, and each prompt group trains as one multi-sample rollout."""

import pytest

pytestmark = pytest.mark.integration


def test_opsm_mismatch_metrics_rollout_logprobs_and_rollout_ids_act_in_a_run(slime_run):
    records = slime_run(
        "--num-rollout",
        "1",
        "--rollout-batch-size",
        "4",
        "--n-samples-per-prompt",
        "4",
        "--rollout-max-response-len",
        "4",
        "--get-mismatch-metrics",
        "--use-rollout-logprobs",
        # a negative threshold drops every negative-advantage token: OPSM visibly acts
        "--use-opsm",
        "--opsm-delta",
        "-1",
        "--rollout-id-key",
        "source",
    )  # the data source's record id: a group is one rollout
    train = {key[len("train/") :]: value for key, value in records[0].items() if key.startswith("train/")}
    # the engine and the trainer hold the same weights: π_old/π_rollout is 1 up to float noise
    assert train["tis_weight"] == pytest.approx(1.0, abs=1e-3) and train["tis_clipfrac"] == 0.0
    assert 0.0 <= train["tis_rollout_kl"] < 1e-6
    assert abs(train["ppo_kl"]) < 1e-4  # π/π_rollout: the engine's log-probs of the same weights
    # GRPO gives some samples of each group a negative advantage; OPSM drops their tokens
    assert 0.0 < train["opsm_clipfrac"] < 1.0
    assert train["train_rollout_logprob_abs_diff"] < 1e-3
