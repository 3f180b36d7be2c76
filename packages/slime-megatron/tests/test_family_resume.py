"""Resuming a Megatron checkpoint keeps each model family's own state (an expert bias, MLA's
projections, GLM-4's norms after attention and MLP), at the rank level:
`slime_core.testing.check_rank_resume`. Qwen3's resume is `test_megatron_backend.py`'s; the
driver's side of a resume (data source, rollout id) is tests/test_loop_rerun_and_resume.py's."""

import json

import pytest

from slime_core.testing import check_rank_resume
from slime_megatron.parallel import destroy_parallel
from slime_megatron.rank import MegatronTrainRank

pytestmark = pytest.mark.integration

FAMILIES = ["qwen2", "llama", "qwen3_moe", "glm4", "glm4_moe", "deepseek_v3"]
SETTINGS = dict(
    train_backend="megatron",
    rollout_batch_size=4,
    n_samples_per_prompt=4,
    lr=1e-3,
    micro_batch_size=8,
    rollout_max_response_len=8,
    entropy_coef=0.01,
    weight_decay=0.01,
    lr_warmup_iters=1,
)


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    return path


@pytest.mark.parametrize("family", FAMILIES)
def test_a_resumed_rank_continues_bit_for_bit(prompts, tmp_path, family):
    check_rank_resume(MegatronTrainRank, destroy_parallel, prompts, tmp_path, family, **SETTINGS)
