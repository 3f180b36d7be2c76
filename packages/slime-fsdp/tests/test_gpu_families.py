"""Every model family the FSDP backend trains, one bf16 train step on one CUDA GPU through the
real rank class (in this process, nccl), from a tiny model of the family: the loss is finite,
the gradient is not zero, the weights move, and the rank's log-probs before the step are
transformers' own in float32 to bf16 precision.

Skipped cleanly without CUDA (the ``gpu`` marker).
"""

import json

import pytest

from slime_core.testing import check_gpu_train_step, destroy_default_group
from slime_core.tools.tiny_models import TINY_FAMILIES

pytestmark = pytest.mark.gpu

#: Padded rows (no --use-dynamic-batch-size): Qwen3-Next's linear attention cannot be packed.
SETTINGS = dict(
    train_backend="fsdp",
    bf16=True,
    rollout_batch_size=2,
    n_samples_per_prompt=4,
    lr=1e-3,
    micro_batch_size=4,
    rollout_max_response_len=24,
    entropy_coef=0.01,
)


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    return path


@pytest.mark.parametrize("family", list(TINY_FAMILIES))
def test_one_bf16_train_step_on_one_gpu(prompts, tmp_path, family):
    from slime_fsdp.rank import FSDPTrainRank

    check_gpu_train_step(FSDPTrainRank, destroy_default_group, prompts, tmp_path, family, **SETTINGS)
