"""Context parallelism on CUDA GPUs (nccl): the same code as on CPU (`slime_megatron.context`),
CP 2 over two GPUs of one node against one GPU, on a long-tailed batch (responses of 1 to
2,048 tokens), float32. Prints the step time of both.

Ranks are Ray actors with one GPU each, as in a real run. Skipped cleanly without CUDA (the
``gpu`` marker), and with fewer than two GPUs (nccl takes one rank per GPU).
"""

import json
import time

import pytest
import torch

from slime_core.testing import make_config, synthetic_rollout_batch
from slime_core.tools.tiny_models import build_tiny_model
from slime_core.train_backend import TrainGroup

pytestmark = pytest.mark.gpu

MAX_RESPONSE = 2048


def _run(model_dir, batch, num_ranks: int, **layout):
    """Log-probs of ``batch``, then a warm-up and a timed training step: (log-probs, metrics, seconds)."""
    from slime_megatron.rank import MegatronTrainRank

    config = make_config(
        model_dir / "prompts.jsonl",
        model_dir,
        train_backend="megatron",
        rollout_batch_size=4,
        n_samples_per_prompt=4,
        micro_batch_size=4,
        lr=1e-4,
        rollout_max_response_len=MAX_RESPONSE,
        actor_num_gpus_per_node=num_ranks,
        **layout,
    )
    group = TrainGroup(MegatronTrainRank, config, num_ranks, num_gpus_per_rank=1)
    try:
        group.init()
        log_probs = group.compute_log_probs(batch)
        metrics = group.train(0, batch)
        start = time.perf_counter()
        group.train(1, batch)
        return log_probs, metrics, time.perf_counter() - start
    finally:
        group.shutdown()


def test_context_parallel_ranks_on_two_gpus_score_and_train_like_one(ray_cluster, tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("CP 2 over nccl needs two GPUs (one rank each)")
    model_dir = build_tiny_model(tmp_path / "model", "qwen3", hidden_size=256, num_layers=4, max_positions=4096)
    (model_dir / "prompts.jsonl").write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    batch = synthetic_rollout_batch(num_groups=4, group_size=4, max_response=MAX_RESPONSE)
    one_log_probs, one_metrics, one_seconds = _run(model_dir, batch, 1)
    two_log_probs, two_metrics, two_seconds = _run(model_dir, batch, 2, context_parallel_size=2)
    print(f"\nmegatron CP 1: {one_seconds:.3f} s/step; CP 2: {two_seconds:.3f} s/step")
    for mine, theirs in zip(two_log_probs, one_log_probs, strict=True):
        torch.testing.assert_close(torch.tensor(mine), torch.tensor(theirs), rtol=1e-3, atol=1e-3)
    for key in ("loss", "entropy", "grad_norm"):
        assert two_metrics[key] == pytest.approx(one_metrics[key], rel=1e-3, abs=1e-5), key
