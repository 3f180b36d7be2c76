"""Every model family the Megatron backend builds, one bf16 train step on one CUDA GPU through
the real rank class (in this process, nccl), from a tiny model of the family: the loss is
finite, the gradient is not zero, the weights move, and the rank's log-probs before the step
are transformers' own in float32 to bf16 precision.

Skipped cleanly without CUDA (the ``gpu`` marker), except the check that the list of families
below is the one slime-megatron builds.
"""

import json

import pytest

from slime_core.testing import check_gpu_train_step
from slime_core.tools.tiny_models import TINY_FAMILIES

MEGATRON_FAMILIES = ["qwen3", "qwen2", "llama", "qwen3_moe", "glm4", "glm4_moe", "deepseek_v3"]
SETTINGS = dict(
    train_backend="megatron",
    bf16=True,
    rollout_batch_size=2,
    n_samples_per_prompt=4,
    lr=1e-3,
    micro_batch_size=4,
    rollout_max_response_len=24,
    entropy_coef=0.01,
)


def test_the_list_is_every_tiny_family_megatron_builds():
    from slime_megatron.models.family import unsupported_reason

    assert MEGATRON_FAMILIES == [family for family in TINY_FAMILIES if unsupported_reason(family) is None]


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    return path


@pytest.mark.gpu
@pytest.mark.parametrize("family", MEGATRON_FAMILIES)
def test_one_bf16_train_step_on_one_gpu(prompts, tmp_path, family):
    from slime_megatron.parallel import destroy_parallel
    from slime_megatron.rank import MegatronTrainRank

    check_gpu_train_step(MegatronTrainRank, destroy_parallel, prompts, tmp_path, family, **SETTINGS)
