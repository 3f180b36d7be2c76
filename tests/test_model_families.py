"""The model families slime's users train, end to end on both train backends with the CPU
engine: a tiny model of each released shape (`slime tiny-model --family`), two GRPO rollouts
that train, a weight push after each, after which the engine's log-probs equal the trainer's,
and a checkpoint. Qwen3 runs are tested beside the backends (tests/test_loop_*.py,
packages/slime-megatron/tests/test_megatron_backend.py). Resuming a checkpoint is tested per
family at the rank level (packages/slime-{megatron,fsdp}/tests/test_family_resume.py).
Qwen3-Next and GLM-5, which only the FSDP backend trains, are tests/test_new_architectures.py's."""

import pytest

from slime_core.tools.tiny_models import build_tiny_model

pytestmark = pytest.mark.integration

#: The released shapes of slime-core's tiny models (`TINY_FAMILIES`). Their variants (Qwen2.5
#: tied, Qwen3 untied) differ from these runs in nothing a run reaches that another does not: Qwen3
#: runs tied in tests/test_loop_sync.py, Qwen2.5-7B and Llama push an untied output layer, and
#: packages/slime-megatron/tests/test_conversion.py exports every variant's weights.
RUN_FAMILIES = ["qwen2", "llama", "qwen3_moe", "glm4", "glm4_moe", "deepseek_v3"]

#: (family, backend) of each run: every family on both backends but Qwen3-MoE on Megatron, whose run
#: this would repeat is tests/test_parallel_layouts.py's (its one-rank run and every MoE line: the
#: tiny Qwen3-MoE trains, every push checked by the engine, saved and resumed).
RUNS = [(family, backend) for family in RUN_FAMILIES for backend in ("fsdp", "megatron")]
RUNS.remove(("qwen3_moe", "megatron"))


@pytest.mark.parametrize("family, backend", RUNS, ids=[f"{family}-{backend}" for family, backend in RUNS])
def test_a_family_trains_pushes_every_weight_and_saves(slime_run, tmp_path, family, backend):
    """The routers' correction biases are random, so an engine that missed them (or a trainer
    that exported them wrong) would route differently and its log-probs would differ."""
    model = build_tiny_model(tmp_path / "model", family, hidden_size=32, router_bias=0.3)
    records = slime_run(
        "--hf-checkpoint",
        str(model),
        "--train-backend",
        backend,
        "--check-weight-update-equal",
        "--num-rollout",
        "2",
        "--rollout-batch-size",
        "2",
        "--n-samples-per-prompt",
        "4",
        "--rollout-max-response-len",
        "4",
        "--entropy-coef",
        "0.01",  # a gradient even when every sample of a group gets the same reward
        "--save",
        str(tmp_path / "ckpt"),
        "--save-interval",
        "2",
    )
    assert [r["weight_version"] for r in records] == [1, 2]
    for record in records:
        assert record["train/grad_norm"] > 0  # it trained: each push carries new weights
        assert record["weight_update/max_logprob_diff"] < 1e-3  # the engine took every weight
    assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert any((tmp_path / "ckpt" / "iter_0000001").iterdir())
