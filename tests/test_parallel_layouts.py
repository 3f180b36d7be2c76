"""The Megatron backend's parallel layouts through ``slime run``: each layout of `LAYOUTS` (each
combines two kinds of sharding) trains the same two GRPO rollouts as one rank does (real Ray, the
CPU engine, ``--check-weight-update-equal`` after each push, ``--save``), and

- its rollout-0 loss and gradient norm equal the one-rank run's within float tolerance (the same
  samples, since rollout 0 is generated from the checkpoint's weights with per-sample seeds);
- a resume from its checkpoint of rollout 0 reproduces its rollout 1 bit for bit (a checkpoint of
  one kind alone resumes bit for bit elsewhere: TP in tests/test_loop_rerun_and_resume.py's
  Megatron TP-2 rerun and resume, PP in packages/slime-megatron/tests/test_pipeline_parallel.py,
  CP in its test_megatron_backend.py, DP in ep2-tp2-sp here (its dense weights on 2 data-parallel
  replicas)).

One kind of sharding alone has no line: each is proven through ``slime run`` inside these lines and
against one rank at rank level (losses, gradient norms and weights): DP 2 in ep2-tp2-sp and
``test_two_ranks_in_either_layout_train_like_one_rank[dp2]``; TP 2 with sequence parallelism in
ep2-tp2-sp, moe-tp2-pp2-sp and moe-tp2-cp2-sp and ``...[tp2-sp]`` (a dense model's TP-2 push:
``test_the_cpu_example_loop_runs_with_the_megatron_backend``); a MoE's TP 2 with SP likewise (and
tests/test_routing_replay.py's Megatron R3 run) and
``test_a_moe_model_on_two_ranks_trains_like_one_rank[tp2-sp]``; PP 2 in pp2-cp2 and moe-tp2-pp2-sp
and ``test_two_pipeline_stages_train_like_one_rank``; CP 2 in pp2-cp2 (with dynamic batches of 16
tokens a rank against one rank's fixed micro-batches) and moe-tp2-cp2-sp, and
``test_context_parallel_ranks_score_and_train_like_one_rank``. MoE routing replay (R3) on pipeline
stages and on context-parallel chunks is the moe-tp2-pp2-sp and moe-tp2-cp2-sp lines' (each
stage's routers replay their own layers, each rank's the tokens of its chunks, sliced again by
sequence parallelism); its route without sequence parallelism (the whole micro-batch's tokens) is
tests/test_routing_replay.py's Megatron R2 run on CP 2, whose updates replay the same way.

Dense TP 2 × PP 2 and TP 2 × CP 2 have no line: their training is compared with one rank's at
rank level (packages/slime-megatron/tests: ``test_two_pipeline_stages_train_like_one_rank[qwen3-tp2]``,
``test_tensor_and_context_parallel_ranks_train_like_one_rank``: losses, gradient norms and the
exported weights), and their route through ``slime run`` (the push gathered from both kinds of
shards, checked by the engine) is the MoE lines' moe-tp2-pp2-sp and moe-tp2-cp2-sp, whose
attention and embeddings are sharded as the dense model's.

A layout is one line of `LAYOUTS` (its id, the tiny model family, the rank count, the flags);
the one-rank runs are shared by the module (`baselines`). A new layout is one more line. What
a layout may not be (sizes that do not divide the model) is refused by the config checks:
packages/slime-megatron/tests/test_layout_refusals.py.
"""

import json

import pytest

from slime_core.cli.run import run_command
from slime_core.loop.run_dir import read_metrics
from slime_core.plugins import Plugins
from slime_core.tools.tiny_models import build_tiny_model

pytestmark = pytest.mark.integration

#: MoE routing replay (R3) on a layout: the trainer replays the engine's routing of each token
R3 = "--use-rollout-routing-replay --router none"

#: (id, tiny model family, training ranks, the layout's flags)
LAYOUTS = [
    ("ep2-tp2-sp", "qwen3_moe", 4, "--tensor-model-parallel-size 2 --expert-model-parallel-size 2 --sequence-parallel"),
    (
        "pp2-cp2",
        "qwen3",
        4,
        "--pipeline-model-parallel-size 2 --context-parallel-size 2 --use-dynamic-batch-size --max-tokens-per-gpu 16",
    ),
    (
        "moe-tp2-pp2-sp",
        "qwen3_moe",
        4,
        f"--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel {R3}",
    ),
    (
        "moe-tp2-cp2-sp",
        "qwen3_moe",
        4,
        f"--tensor-model-parallel-size 2 --context-parallel-size 2 --sequence-parallel {R3}",
    ),
]

#: the training metrics a layout may change only by float rounding
TOLERANCE = dict(rel=1e-4, abs=0)


@pytest.fixture(scope="module")
def layout_run(ray_cluster, tmp_path_factory, test_rewards):
    """``layout_run(family, ranks, *flags, output=NAME) -> [metrics of each rollout]``: ``slime run``
    of GRPO rollouts (4 prompt groups of 2 samples: one group per rank at least) on the tiny
    ``family`` (built once) with Megatron on ``ranks`` ranks."""
    root = tmp_path_factory.mktemp("layouts")
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"{a}+{a}=", "label": str(2 * a)}) + "\n" for a in range(8)))
    models = {}

    def run(family: str, ranks: int, *flags: str, output: str) -> list[dict]:
        if family not in models:
            models[family] = build_tiny_model(root / family, family, hidden_size=32)
        argv = ["--prompt-data", str(prompts), "--hf-checkpoint", str(models[family]), "--rollout-engine", "cpu"]
        argv += ["--rm-type", "digit_share", "--advantage-estimator", "grpo", "--entropy-coef", "0.01"]
        argv += ["--rollout-batch-size", "4", "--n-samples-per-prompt", "2", "--rollout-max-response-len", "4"]
        argv += ["--train-backend", "megatron", "--actor-num-gpus-per-node", str(ranks), "--colocate"]
        argv += ["--rollout-num-gpus", "1", "--check-weight-update-equal", "--lr", "1e-3", "--seed", "7"]
        argv += ["--output-dir", str(root / output), *flags]
        plugins = Plugins()
        plugins.register_object("layout_test_rewards", test_rewards)
        try:
            assert run_command(argv, plugins) == 0
        finally:
            plugins.unregister("layout_test_rewards")
        return [r for r in read_metrics(root / output / "metrics.jsonl") if r["rollout_id"] >= 0]

    run.root = root
    return run


@pytest.fixture(scope="module")
def baselines(layout_run):
    """The one-rank run of each family, made once for the module (on first use)."""
    runs = {}

    def get(family: str) -> list[dict]:
        if family not in runs:
            runs[family] = layout_run(family, 1, "--num-rollout", "1", output=f"one-rank-{family}")
        return runs[family]

    return get


@pytest.mark.parametrize("name, family, ranks, layout", LAYOUTS, ids=[entry[0] for entry in LAYOUTS])
def test_a_layout_trains_as_one_rank_does_and_resumes_bit_identically(
    layout_run, baselines, name, family, ranks, layout
):
    flags = layout.split()
    ckpt = str(layout_run.root / f"ckpt-{name}")
    whole = layout_run(
        family, ranks, "--num-rollout", "2", "--save", ckpt, "--save-interval", "1", *flags, output=f"whole-{name}"
    )
    assert [r["weight_version"] for r in whole] == [1, 2]
    for record in whole:
        assert record["weight_update/max_logprob_diff"] < 1e-3  # the engines hold the trainer's weights
    one_rank = baselines(family)[0]
    assert whole[0]["train/grad_norm"] > 0
    for key in ("train/loss", "train/grad_norm"):
        assert whole[0][key] == pytest.approx(one_rank[key], **TOLERANCE), key
    if R3 in layout:
        assert_replayed_in_place(whole)
    resumed = layout_run(
        family, ranks, "--num-rollout", "2", "--load", ckpt, "--ckpt-step", "0", *flags, output=f"resumed-{name}"
    )
    assert [r["rollout_id"] for r in resumed] == [1]
    learned = [key for key in whole[1] if key.startswith(("train/", "rollout/reward", "rollout/response"))]
    engine_side = "train/train_rollout_logprob_abs_diff"  # the engine's log-probs: float noise of its batching
    learned = [key for key in learned if key != engine_side]
    assert "train/loss" in learned and "train/grad_norm" in learned
    assert {key: resumed[0][key] for key in learned} == {key: whole[1][key] for key in learned}


def assert_replayed_in_place(records: list[dict]) -> None:
    """A layout's R3 run (one step per rollout: the update is the only forward, no π_old pass): the
    float32 trainer routes as the float32 engine did, so each rank's routers, given the engine's
    experts of the tokens they see (their pipeline stage's layers, their context-parallel chunks),
    would have picked the same ones; experts replayed to other tokens or layers would differ (and
    the loss with them)."""
    for record in records:
        assert record["train/routing_replay_update_mismatch"] < 0.01
        assert record["train/train_rollout_logprob_abs_diff"] < 1e-3
