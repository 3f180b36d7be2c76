"""Every model family the FSDP backend trains, one bf16 train step on one CUDA GPU through the
real rank class (in this process, nccl), from a tiny model of the family: the loss is finite,
the gradient is not zero, the weights move, and the rank's log-probs before the step are
transformers' own in float32 to bf16 precision.

Skipped cleanly without CUDA (the ``gpu`` marker).
"""

import json

import pytest
import torch

from slime_core.testing import log_probs_alone, make_config, synthetic_rollout_batch, train_one_rollout
from slime_core.tiny_models import TINY_FAMILIES, build_tiny_model
from slime_core.train_backend import TrainGroup

pytestmark = pytest.mark.gpu

#: Padded rows (no --use-dynamic-batch-size): Qwen3-Next's linear attention cannot be packed.
SETTINGS = dict(train_backend="fsdp", bf16=True, rollout_batch_size=2, n_samples_per_prompt=4, lr=1e-3,
                micro_batch_size=4, rollout_max_response_len=24, entropy_coef=0.01)


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    return path


@pytest.mark.parametrize("family", list(TINY_FAMILIES))
def test_one_bf16_train_step_on_one_gpu(prompts, tmp_path, family):
    """Hidden size 128: head dims of 16 or more, as the flash kernels want."""
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from slime_fsdp.rank import FSDPTrainRank

    model_dir = build_tiny_model(tmp_path / family, family, hidden_size=128, max_positions=512)
    batch = synthetic_rollout_batch(num_groups=2, max_response=24, seed=1)
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    expected = [log_probs_alone(reference, t, r).cpu() for t, r in zip(batch.tokens, batch.response_lengths)]
    del reference
    try:
        group = TrainGroup(FSDPTrainRank, make_config(prompts, model_dir, **SETTINGS), 1, in_process=True)
        group.init()
        assert torch.cuda.memory_allocated() > 0  # the rank's shards are on the GPU
        log_probs, metrics, moved = train_one_rollout(group, batch)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    for got, want in zip(log_probs, expected):
        torch.testing.assert_close(torch.tensor(got), want, rtol=0.0, atol=0.1)  # bf16 against float32
    assert max((torch.tensor(got) - want).abs().mean().item() for got, want in zip(log_probs, expected)) < 0.02
    assert torch.isfinite(torch.tensor(metrics["loss"])) and metrics["grad_norm"] > 0
    assert "model.embed_tokens.weight" in moved
