"""Pipeline parallelism on the Megatron backend, on the route a run takes: ranks as Ray actors
joined by gloo (CPU mode), tiny models, against one rank.

A pipeline of 2 stages (and tensor 2 × pipeline 2) gives the one-rank run's log-probs (actor,
reference, teacher), its first rollout's loss, metrics and gradient norm, and its weights; the
dense families with tied (qwen3) and untied (qwen2, here with uneven stages) embeddings, a MoE
(qwen3_moe), and two model chunks per stage (virtual stages, megatron's interleaved schedule).
Exports for the engines and ``--save-hf`` gather every stage's weights (bit-exact), checkpoints
resume bit for bit, HF → Megatron → HF is bit-exact over 2 stages for every tiny
shape the backend builds. ``slime run`` with PP 2 and TP 2 × PP 2: the root
tests/test_parallel_layouts.py.
"""

import json
from types import SimpleNamespace

import pytest
import torch

from slime_core.testing import make_config
from slime_core.testing import synthetic_rollout_batch as rollout_batch
from slime_core.tools.tiny_models import TINY_SHAPES, build_tiny_model
from slime_core.train_backend import TrainGroup
from slime_megatron.models.family import unsupported_reason
from slime_megatron.rank import MegatronTrainRank

pytestmark = pytest.mark.integration

#: One GRPO rollout with every loss term on (as test_megatron_backend's SETTINGS), 2 micro-batches
#: per replica, so the pipeline schedule runs warm-up, steady state and cool-down.
SETTINGS = dict(
    rollout_batch_size=4,
    n_samples_per_prompt=2,
    num_steps_per_rollout=1,
    lr=1e-3,
    rollout_max_response_len=8,
    micro_batch_size=4,
    use_kl_loss=True,
    kl_loss_coef=0.1,
    entropy_coef=0.01,
    weight_decay=0.01,
)
COMPARED_METRICS = ("loss", "pg_loss", "kl_loss", "entropy", "grad_norm", "lr")

#: case -> (family, tiny model's layers, options of its pipeline run): tied embeddings; untied
#: ones on uneven stages (1 layer, then 2); a MoE; virtual stages of one layer (each rank runs two
#: model chunks, layers 0 and 2 or 1 and 3, in megatron's interleaved schedule).
CASES = {
    "qwen3": ("qwen3", 2, {}),
    "qwen2-uneven": ("qwen2", 3, dict(decoder_first_pipeline_num_layers=1)),
    "qwen3_moe": ("qwen3_moe", 2, {}),
    "qwen3-interleaved": ("qwen3", 4, dict(num_layers_per_virtual_pipeline_stage=1)),
}


def batch():
    return rollout_batch(num_groups=4, group_size=2, seed=0)


@pytest.fixture(scope="module")
def pp_config(tmp_path_factory):
    """``pp_config(case, teacher=False, **overrides)``: a resolved config for the tiny model of
    the case (`CASES`); with ``teacher``, that model is also a distillation teacher (coefficient 0)."""
    root = tmp_path_factory.mktemp("pp")
    prompts = root / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")

    def build(case: str, teacher: bool = False, **overrides):
        family, layers, _ = CASES[case]
        model_dir = root / f"{family}-{layers}"
        if not model_dir.exists():
            build_tiny_model(model_dir, family, num_layers=layers)
        if teacher:
            overrides.update(opd_teacher_load=str(model_dir), opd_kl_coef=0.0)
        return make_config(prompts, model_dir, **{**SETTINGS, "train_backend": "megatron", **overrides})

    return build


def all_weights(group: TrainGroup) -> dict[str, torch.Tensor]:
    return {name: tensor for bucket in group.export_weights(64 * 1024) for name, tensor in bucket}


def run(config, num_ranks: int, rollouts: int = 1, num_gpus_per_rank: int = 0, then=None) -> SimpleNamespace:
    """Log-probs of the actor and the reference (and of the teacher, if the config has one) and
    the exported weights before training, then ``rollouts`` rollouts: metrics and weights;
    ``then(group, out)`` goes on with the same group (`save_and_train_on`)."""
    group = TrainGroup(MegatronTrainRank, config, num_ranks, num_gpus_per_rank=num_gpus_per_rank)
    try:
        group.init()
        out = SimpleNamespace(loaded=all_weights(group), log_probs=group.compute_log_probs(batch()))
        out.ref = group.compute_log_probs(batch(), "ref")
        out.teacher = group.compute_log_probs(batch(), "teacher") if config.opd_teacher_load else None
        out.metrics = [group.train(r, rollout_batch(num_groups=4, group_size=2, seed=r)) for r in range(rollouts)]
        out.weights = all_weights(group)
        if then is not None:
            then(group, out)
        return out
    finally:
        group.shutdown()


def assert_runs_alike(got, want) -> None:
    """Same log-probs, first rollout's metrics and weights, to float tolerance (Adam's first step
    divides each gradient by its own magnitude, so a weight whose gradient is float noise can
    move by a few 1e-5 either way)."""
    for mine, theirs in ((got.log_probs, want.log_probs), (got.ref, want.ref), (got.teacher, want.teacher)):
        if mine is not None:
            for a, b in zip(mine, theirs, strict=True):
                torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=1e-5, atol=1e-5)
    for key in COMPARED_METRICS:
        assert got.metrics[0][key] == pytest.approx(want.metrics[0][key], rel=1e-4, abs=1e-6), key
    assert got.weights.keys() == want.weights.keys()
    for name in got.weights:
        torch.testing.assert_close(got.weights[name], want.weights[name], rtol=1e-4, atol=5e-5)


@pytest.fixture(scope="module")
def one_rank(ray_cluster, pp_config):
    """``one_rank(case)``: the run of the case's model on one rank (computed once)."""
    runs = {}

    def get(case: str):
        if case not in runs:
            runs[case] = run(pp_config(case, teacher=True), 1)
        return runs[case]

    return get


#: The cases whose run is also saved after rollout 0 and resumed: tied embeddings on TP 2 × PP 2,
#: and two model chunks per stage (PP 2 alone).
RESUMED = {"qwen3", "qwen3-interleaved"}


@pytest.mark.parametrize(
    "case, tp",
    [("qwen3", 2), ("qwen2-uneven", 1), ("qwen3_moe", 1), ("qwen3-interleaved", 1)],
    ids=["qwen3-tp2", "qwen2-uneven", "qwen3_moe", "qwen3-interleaved"],
)
def test_two_pipeline_stages_train_like_one_rank(one_rank, pp_config, tmp_path, case, tp):
    """Log-probs from the last stage of a forward-only pipeline pass (actor, reference and the
    distillation teacher), the first rollout's loss, metrics and gradient norm from the last
    stage, and the weights after megatron's 1F1B schedule (interleaved with virtual stages): one
    rank's. The export before training is the Hugging Face checkpoint itself, gathered from both
    stages. The tied qwen3 runs on four ranks, two tensor-parallel ranks on each stage (TP 2 × PP
    2; the other cases are PP 2 alone). The cases of `RESUMED` go on as a run saved after rollout 0
    and are resumed: `assert_resumes_bit_for_bit`."""
    from safetensors.torch import load_file

    layout = dict(pipeline_model_parallel_size=2, tensor_model_parallel_size=tp, actor_num_gpus_per_node=2 * tp)
    layout.update(CASES[case][2])
    saving = dict(save=str(tmp_path / "ckpt"), save_hf=str(tmp_path / "hf")) if case in RESUMED else {}
    config = pp_config(case, teacher=True, **layout, **saving)
    got = run(config, 2 * tp, then=save_and_train_on if saving else None)
    assert_runs_alike(got, one_rank(case))
    hf = load_file(f"{config.hf_checkpoint}/model.safetensors")
    assert got.loaded.keys() == hf.keys()
    assert all(torch.equal(got.loaded[name], tensor) for name, tensor in hf.items())
    if saving:
        resumed = pp_config(case, teacher=True, load=str(tmp_path / "ckpt"), **layout)
        assert_resumes_bit_for_bit(got, resumed, 2 * tp, tmp_path / "hf")


def save_and_train_on(group: TrainGroup, out: SimpleNamespace) -> None:
    """After rollout 0: an offload / onload round trip (the weights exported while offloaded, as
    a colocated run pushes them), ``--save`` and ``--save-hf``, then rollout 1: its weights."""
    group.call("offload")
    out.exported = all_weights(group)
    group.call("onload")
    group.call("save", 0)
    group.train(1, rollout_batch(num_groups=4, group_size=2, seed=1))
    out.uninterrupted = all_weights(group)


def assert_resumes_bit_for_bit(got: SimpleNamespace, config, num_ranks: int, hf) -> None:
    """The ``--save-hf`` directory holds exactly the weights exported for the engines after
    rollout 0, and the run resumed from the checkpoint ends rollout 1 with the uninterrupted
    run's weights, bit for bit."""
    from safetensors.torch import load_file

    saved = load_file(hf / "iter_0000000" / "model.safetensors")
    assert saved.keys() == got.exported.keys()
    assert all(torch.equal(saved[name], tensor) for name, tensor in got.exported.items())
    group = TrainGroup(MegatronTrainRank, config, num_ranks)
    try:
        assert group.init() == {"rollout_id": 1, "weight_version": 1}
        group.train(1, rollout_batch(num_groups=4, group_size=2, seed=1))
        resumed = all_weights(group)
    finally:
        group.shutdown()
    assert resumed.keys() == got.uninterrupted.keys()
    assert all(torch.equal(resumed[name], tensor) for name, tensor in got.uninterrupted.items())


# ---------------------------------------------------------------- HF → Megatron → HF over 2 stages

#: Every tiny shape (`slime_core.tools.tiny_models.TINY_SHAPES`: the families and their
#: variants) the Megatron backend builds.
BUILT_SHAPES = sorted(name for name, shape in TINY_SHAPES.items() if unsupported_reason(shape.model_type) is None)


def _load_and_save_hf(rank, sizes, cases):
    """On each rank: every case's stage of the model, loaded from its HF directory and written
    back as an HF directory by ``--save-hf``'s code (gathered over the stages to rank 0)."""
    from transformers import AutoConfig, AutoTokenizer

    from slime_megatron import export
    from slime_megatron.models import build_model, load_hf_weights

    for source, out in cases:
        hf_config = AutoConfig.from_pretrained(source)
        model = build_model(hf_config, sizes)
        load_hf_weights(model, source, hf_config)
        export.save_hf(out, model, hf_config, AutoTokenizer.from_pretrained(source))
        assert len(model.decoder.layers) == 1  # one of the two layers per stage


def test_hf_to_megatron_to_hf_over_two_pipeline_stages_is_bit_exact(run_ranks, tmp_path):
    """For every tiny shape the backend builds: loaded into 2 pipeline stages (embedding on
    the first, output layer on the last, a tied embedding on both) and saved back, the
    checkpoint's tensors, bit for bit."""
    from safetensors.torch import load_file

    cases = []
    for shape in BUILT_SHAPES:
        build_tiny_model(tmp_path / shape, shape, router_bias=0.3)
        cases.append((str(tmp_path / shape), str(tmp_path / f"{shape}-out")))
    run_ranks(_load_and_save_hf, 2, cases, pp=2)
    for shape, (source, out) in zip(BUILT_SHAPES, cases):
        want, got = load_file(f"{source}/model.safetensors"), load_file(f"{out}/model.safetensors")
        assert got.keys() == want.keys(), shape
        assert [n for n in want if not torch.equal(got[n], want[n])] == [], shape


# ---------------------------------------------------------------- refused when the run is configured


@pytest.mark.parametrize(
    "options, message",
    [
        (
            dict(pipeline_model_parallel_size=4, actor_num_gpus_per_node=4),
            r"--pipeline-model-parallel-size 4 does not divide the 2 decoder layers of --hf-checkpoint .*: "
            r"megatron-core gives every pipeline stage the same number of layers; pick a size that divides 2",
        ),
        (
            dict(decoder_first_pipeline_num_layers=1),
            r"--decoder-first-pipeline-num-layers 1: sets the layers of a pipeline stage, and there is one stage; add "
            r"--pipeline-model-parallel-size 2",
        ),
        (
            dict(pipeline_model_parallel_size=2, actor_num_gpus_per_node=2, decoder_last_pipeline_num_layers=2),
            r"--decoder-last-pipeline-num-layers 2 leaves 0 of the 2 decoder layers of --hf-checkpoint .* for the "
            r"other 1 stage\(s\)",
        ),
        (
            dict(pipeline_model_parallel_size=2, actor_num_gpus_per_node=2, decoder_first_pipeline_num_layers=0),
            "every pipeline stage needs at least one layer",
        ),
        (
            dict(num_layers_per_virtual_pipeline_stage=1),
            r"--num-layers-per-virtual-pipeline-stage 1: splits pipeline stages into model chunks, and there is one "
            r"stage; add --pipeline-model-parallel-size 2",
        ),
        (
            dict(pipeline_model_parallel_size=2, actor_num_gpus_per_node=2, num_layers_per_virtual_pipeline_stage=2),
            r"--num-layers-per-virtual-pipeline-stage 2 does not divide the 1 decoder layers of each pipeline stage",
        ),
        (
            dict(
                pipeline_model_parallel_size=2,
                actor_num_gpus_per_node=2,
                num_layers_per_virtual_pipeline_stage=1,
                decoder_first_pipeline_num_layers=1,
            ),
            "--num-layers-per-virtual-pipeline-stage 1 with --decoder-first-pipeline-num-layers: virtual pipeline "
            "stages are built here for stages of equal layers",
        ),
    ],
    ids=[
        "layers-do-not-divide",
        "uneven-without-pipeline",
        "empty-stage",
        "zero-layers",
        "virtual-without-pipeline",
        "virtual-chunks-do-not-divide",
        "virtual-and-uneven",
    ],
)
def test_pipeline_layouts_megatron_cannot_build_are_config_errors(tiny_model_dir, tmp_path, options, message):
    """What a pipeline rank would refuse (or build wrong) when it builds its stage is said by
    ``slime run --dry-run`` already, with the fix."""
    from slime_core.config import ConfigError

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    with pytest.raises(ConfigError, match=message):
        make_config(prompts, tiny_model_dir, rollout_batch_size=2, train_backend="megatron", **options)


# ---------------------------------------------------------------- on GPUs


@pytest.mark.gpu
def test_two_pipeline_stages_on_two_gpus_train_like_one_gpu(ray_cluster, pp_config):
    """On one node's first 2 GPUs (nccl between the stages, the CUDA code paths that CPU mode
    shims): the untied family on uneven stages gives one GPU's log-probs, first rollout and
    weights. Skipped cleanly without CUDA, and with fewer than 2 GPUs."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    options = CASES["qwen2-uneven"][2]
    want = run(pp_config("qwen2-uneven"), 1, num_gpus_per_rank=1)
    got = run(
        pp_config("qwen2-uneven", pipeline_model_parallel_size=2, actor_num_gpus_per_node=2, **options),
        2,
        num_gpus_per_rank=1,
    )
    assert_runs_alike(got, want)
