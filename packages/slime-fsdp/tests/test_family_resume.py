"""Resuming an FSDP checkpoint keeps each model family's own state (routers' correction
biases: buffers that no optimizer updates; Qwen3-Next's linear attention, GLM-5's frozen
sparse-attention indexer), and the frozen parameters of ``--freeze-params-name-list`` /
``--only-train-params-name-list`` (restored from the checkpoint, with optimizer state for the
trained ones alone), at the rank level: `slime_core.testing.check_rank_resume`. Qwen3's resume
is `test_fsdp_backend.py`'s; the driver's side of a resume (data source, rollout id) is
tests/test_loop_rerun_and_resume.py's."""

import pytest
from torch.distributed.checkpoint import FileSystemReader

from slime_core.testing import check_rank_resume, destroy_default_group
from slime_fsdp.rank import FSDPTrainRank

pytestmark = pytest.mark.integration

FAMILIES = ["qwen2", "llama", "qwen3_moe", "glm4", "glm4_moe", "deepseek_v3", "qwen3_next", "glm_moe_dsa"]
SETTINGS = dict(
    train_backend="fsdp",
    rollout_batch_size=4,
    n_samples_per_prompt=4,
    lr=1e-3,
    micro_batch_size=8,
    rollout_max_response_len=8,
    entropy_coef=0.01,
    weight_decay=0.01,
    lr_warmup_iters=1,
)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_resumed_rank_continues_bit_for_bit(prompt_file, tmp_path, family):
    check_rank_resume(FSDPTrainRank, destroy_default_group, prompt_file, tmp_path, family, **SETTINGS)


@pytest.mark.slow
def test_a_rank_with_frozen_params_resumes_bit_for_bit_with_optimizer_state_for_the_trained_ones(prompt_file, tmp_path):
    frozen = dict(only_train_params_name_list=["layers"], freeze_params_name_list=[r"layers\.0\."])
    check_rank_resume(FSDPTrainRank, destroy_default_group, prompt_file, tmp_path, "qwen2", **SETTINGS, **frozen)
    (checkpoint,) = (tmp_path / "ckpt").glob("iter_*")
    keys = FileSystemReader(str(checkpoint)).read_metadata().state_dict_metadata
    with_state = {key.split(".", 2)[2].rsplit(".", 1)[0] for key in keys if key.startswith("optimizer.state.")}
    model = {key.removeprefix("model.") for key in keys if key.startswith("model.")}
    assert with_state and all(".layers.1." in name for name in with_state), sorted(with_state)
    assert {name for name in model if ".layers.1." in name} == with_state
