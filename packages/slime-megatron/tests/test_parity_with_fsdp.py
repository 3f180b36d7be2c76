"""Parity of the Megatron and FSDP backends: the same tiny model, data and settings give the
same log-probs and first-step metrics, and nearly the same weights after a few GRPO steps."""

import json

import pytest
import torch

from slime_core.testing import make_config
from slime_core.testing import synthetic_rollout_batch as rollout_batch
from slime_core.train_backend import TrainGroup
from slime_fsdp.rank import FSDPTrainRank
from slime_megatron.rank import MegatronTrainRank

pytestmark = pytest.mark.integration

#: Every loss term on (KL to the reference, entropy) and a warmup + cosine schedule with
#: weight decay, so each of them has to agree.
SETTINGS = dict(
    rollout_batch_size=4,
    n_samples_per_prompt=4,
    num_steps_per_rollout=1,
    lr=1e-3,
    rollout_max_response_len=8,
    micro_batch_size=3,
    use_kl_loss=True,
    kl_loss_coef=0.1,
    entropy_coef=0.01,
    lr_warmup_iters=1,
    lr_decay_style="cosine",
    lr_decay_iters=4,
    weight_decay=0.01,
)
ROLLOUTS = 3


def run(rank_class, config) -> dict:
    """Log-probs as loaded, then `ROLLOUTS` rollouts of training on one rank; metrics and weights."""
    group = TrainGroup(rank_class, config, 1)
    try:
        group.init()
        result = {"log_probs": group.compute_log_probs(rollout_batch(seed=0))}
        result["metrics"] = [group.train(rollout_id, rollout_batch(seed=rollout_id)) for rollout_id in range(ROLLOUTS)]
        result["weights"] = {name: t for bucket in group.export_weights(1 << 20) for name, t in bucket}
    finally:
        group.shutdown()
    return result


def test_megatron_and_fsdp_agree_on_log_probs_loss_and_weights(ray_cluster, tiny_model_dir, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    megatron = run(MegatronTrainRank, make_config(prompts, tiny_model_dir, train_backend="megatron", **SETTINGS))
    fsdp = run(FSDPTrainRank, make_config(prompts, tiny_model_dir, train_backend="fsdp", **SETTINGS))
    for got, want in zip(megatron["log_probs"], fsdp["log_probs"]):
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=0.0, atol=1e-5)
    first, expected = megatron["metrics"][0], fsdp["metrics"][0]
    assert first.keys() == expected.keys()
    for key in first:
        assert first[key] == pytest.approx(expected[key], rel=1e-4, abs=1e-6), key
    assert abs(first["kl_loss"]) < 1e-9 and first["entropy"] > 0  # the reference is the starting policy
    assert megatron["weights"].keys() == fsdp["weights"].keys()
    moved = 0.0
    for name, tensor in megatron["weights"].items():
        torch.testing.assert_close(tensor, fsdp["weights"][name], rtol=1e-3, atol=1e-4)
        moved = max(moved, (tensor - fsdp["weights"][name]).abs().max().item())
    assert moved < 1e-4  # against a learning rate of 1e-3 over three steps
