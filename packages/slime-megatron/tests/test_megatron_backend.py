"""The Megatron-core backend on real Ray actors and gloo process groups (CPU mode), with a
tiny Qwen3 model: parallel layouts against one rank, resume, offload, weight export, the loop."""

import json
from types import SimpleNamespace

import pytest
import torch

from slime_core.testing import make_config
from slime_core.testing import synthetic_rollout_batch as rollout_batch
from slime_core.train_backend import TrainGroup
from slime_megatron.layout import check_layout
from slime_megatron.rank import MegatronTrainRank

pytestmark = pytest.mark.integration

#: A GRPO step with every loss term on and a non-constant learning rate, shared by the runs
#: compared below.
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
MOE_ROLLOUTS = 2  # the Qwen3-MoE runs
COMPARED_METRICS = ("loss", "pg_loss", "kl_loss", "entropy", "grad_norm", "lr")


@pytest.fixture(scope="session")
def megatron_config(tmp_path_factory, tiny_model_dir):
    """``megatron_config(model_dir=tiny_model_dir, **overrides)``: a resolved config for a
    tiny model and `SETTINGS`."""
    prompts = tmp_path_factory.mktemp("megatron-data") / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")

    def build(model_dir=tiny_model_dir, **overrides):
        return make_config(prompts, model_dir, **{**SETTINGS, "train_backend": "megatron", **overrides})

    return build


def start(config, num_ranks: int = 1) -> TrainGroup:
    group = TrainGroup(MegatronTrainRank, config, num_ranks)
    group.init()
    return group


def all_weights(group: TrainGroup) -> dict[str, torch.Tensor]:
    return {name: tensor for bucket in group.export_weights(64 * 1024) for name, tensor in bucket}


def train_rollouts(group: TrainGroup, rollout_ids) -> list[dict[str, float]]:
    return [group.train(rollout_id, rollout_batch(seed=rollout_id)) for rollout_id in rollout_ids]


@pytest.fixture(scope="session")
def one_rank(ray_cluster, megatron_config, tmp_path_factory, tiny_model_dir):
    """The reference run on one rank: log-probs (actor, reference, a distillation teacher
    loaded from the same directory with coefficient 0) and weights as loaded, then `ROLLOUTS`
    rollouts of training, with an offload / onload round trip and a checkpoint (and an HF
    export) after the first."""
    root = tmp_path_factory.mktemp("megatron-ckpt")
    group = start(
        megatron_config(
            save=str(root / "ckpt"), save_hf=str(root / "hf"), opd_teacher_load=str(tiny_model_dir), opd_kl_coef=0.0
        )
    )
    try:
        run = SimpleNamespace(
            checkpoint=root / "ckpt",
            hf=root / "hf" / "iter_0000000",
            loaded=all_weights(group),
            log_probs=group.compute_log_probs(rollout_batch(seed=0)),
        )
        run.ref, run.teacher = (group.compute_log_probs(rollout_batch(seed=0), model) for model in ("ref", "teacher"))
        run.metrics = train_rollouts(group, [0])
        run.before_offload = group.compute_log_probs(rollout_batch(seed=0))
        group.call("offload")
        group.call("onload")
        run.after_onload = group.compute_log_probs(rollout_batch(seed=0))
        group.call("save", 0)
        run.metrics += train_rollouts(group, range(1, ROLLOUTS))
        run.weights, run.version = all_weights(group), group.call("weight_version")[0]
        run.memory = group.call("memory")[0]
    finally:
        group.shutdown()
    return run


def trained_run(config, num_ranks: int, rollouts: int = ROLLOUTS) -> SimpleNamespace:
    """``rollouts`` rollouts on ``num_ranks`` ranks: each rollout's metrics and the final weights."""
    group = start(config, num_ranks)
    try:
        return SimpleNamespace(metrics=train_rollouts(group, range(rollouts)), weights=all_weights(group))
    finally:
        group.shutdown()


def assert_trains_like(got, want, weights_atol: float = 1e-5) -> None:
    """``got`` and ``want`` (``metrics``, ``weights``) have the same loss curve and weights,
    to float tolerance."""
    assert len(got.metrics) == len(want.metrics)
    for step, (mine, theirs) in enumerate(zip(got.metrics, want.metrics)):
        for key in COMPARED_METRICS:
            assert mine[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), (step, key)
    assert got.weights.keys() == want.weights.keys()
    for name in got.weights:
        torch.testing.assert_close(got.weights[name], want.weights[name], rtol=1e-4, atol=weights_atol)


@pytest.mark.parametrize(
    "layout",
    [dict(tensor_model_parallel_size=1), dict(tensor_model_parallel_size=2, sequence_parallel=True)],
    ids=["dp2", "tp2-sp"],
)
def test_two_ranks_in_either_layout_train_like_one_rank(one_rank, megatron_config, layout):
    """Same loss curve and weights as one rank; with DP 2 this fails if the model-grads
    finalisation (the data-parallel gradient all-reduce) is not wired into the schedule, with
    sequence parallelism if the norms' gradients are not summed over the tensor-parallel ranks.
    TP 2 without sequence parallelism: the next test."""
    assert_trains_like(trained_run(megatron_config(actor_num_gpus_per_node=2, **layout), num_ranks=2), one_rank)


def test_tensor_parallel_ranks_train_like_one_rank_and_one_prompt_group_feeds_their_replica(one_rank, megatron_config):
    """TP 2 gives one rank's loss curve and weights. The driver hands prompt groups per model
    replica, not per rank (`TrainGroup.replicas`, from each rank's ``data_parallel_rank``): TP 2's
    two ranks are one replica, so a rollout of one group feeds them (slime's launches give many
    ranks few groups), with the one-rank log-probs (before training) and a gradient (after the
    compared rollouts, so the comparison keeps one rank's batches)."""
    group = start(megatron_config(actor_num_gpus_per_node=2, tensor_model_parallel_size=2), num_ranks=2)
    try:
        assert group.replicas == [0, 0]
        one_group = rollout_batch(seed=0).select([0, 1, 2, 3])
        assert set(one_group.group_ids) == {0}
        got = group.compute_log_probs(one_group)
        for mine, theirs in zip(got, one_rank.log_probs[:4], strict=True):
            torch.testing.assert_close(torch.tensor(mine), torch.tensor(theirs), rtol=1e-4, atol=1e-5)
        trained = SimpleNamespace(metrics=train_rollouts(group, range(ROLLOUTS)), weights=all_weights(group))
        assert group.train(ROLLOUTS, one_group)["grad_norm"] > 0
    finally:
        group.shutdown()
    assert_trains_like(trained, one_rank)


@pytest.fixture(scope="session")
def moe_one_rank(ray_cluster, megatron_config, tiny_moe_model_dir):
    """The tiny Qwen3-MoE trained for `MOE_ROLLOUTS` rollouts on one rank."""
    return trained_run(megatron_config(tiny_moe_model_dir), num_ranks=1, rollouts=MOE_ROLLOUTS)


@pytest.mark.parametrize(
    "layout",
    [dict(expert_model_parallel_size=2), dict(tensor_model_parallel_size=2, sequence_parallel=True)],
    ids=["ep2", "tp2-sp"],
)
def test_a_moe_model_on_two_ranks_trains_like_one_rank(moe_one_rank, megatron_config, tiny_moe_model_dir, layout):
    """Experts split over two ranks (EP 2, the dense layers data-parallel), or every layer
    over two tensor-parallel ranks (which megatron allows for MoE only with sequence
    parallelism): the one-rank loss curve and weights, experts included."""
    config = megatron_config(tiny_moe_model_dir, actor_num_gpus_per_node=2, **layout)
    assert_trains_like(trained_run(config, num_ranks=2, rollouts=MOE_ROLLOUTS), moe_one_rank)


def test_exported_weights_are_the_hf_checkpoint_and_offload_keeps_them(one_rank, tiny_model_dir):
    """Loading then exporting is exact; before any update the reference and the teacher
    give the actor's log-probs; an offload / onload round trip changes nothing."""
    from safetensors.torch import load_file

    hf = load_file(tiny_model_dir / "model.safetensors")
    assert one_rank.loaded.keys() == hf.keys()
    for name, tensor in hf.items():
        assert torch.equal(one_rank.loaded[name], tensor), name
    assert one_rank.ref == one_rank.log_probs
    for teacher, actor in zip(one_rank.teacher, one_rank.log_probs):
        torch.testing.assert_close(torch.tensor(teacher), torch.tensor(actor), rtol=0.0, atol=1e-6)
    assert one_rank.after_onload == one_rank.before_offload != one_rank.log_probs
    assert one_rank.version == ROLLOUTS and one_rank.memory["peak_rss_gib"] > 0.1


def test_resuming_the_checkpoint_continues_exactly(one_rank, megatron_config):
    """The run resumed after rollout 0 (optimizer, schedule position and RNG restored) ends
    with the uninterrupted run's weights, bit for bit; the HF export beside the checkpoint
    loads in transformers."""
    from transformers import AutoModelForCausalLM

    assert sorted(p.name for p in one_rank.checkpoint.iterdir()) == [
        "iter_0000000",
        "latest_checkpointed_iteration.txt",
    ]
    assert AutoModelForCausalLM.from_pretrained(one_rank.hf).config.num_hidden_layers == 2
    group = TrainGroup(MegatronTrainRank, megatron_config(load=str(one_rank.checkpoint)), 1)
    try:
        assert group.init() == {"rollout_id": 1, "weight_version": 1}
        metrics = train_rollouts(group, range(1, ROLLOUTS))
        weights = all_weights(group)
    finally:
        group.shutdown()
    assert [m["lr"] for m in metrics] == [m["lr"] for m in one_rank.metrics[1:]]
    for name in one_rank.weights:
        assert torch.equal(weights[name], one_rank.weights[name]), name


def test_the_cpu_example_loop_runs_with_the_megatron_backend(ray_cluster, tiny_model_dir, tmp_path):
    """``slime run`` as in examples/quickstart/grpo_addition.yaml, on the tiny model,
    colocated, with two tensor-parallel ranks: every rollout's new weights reach the CPU engine
    (checked token by token; the check's probe feeds both ranks)."""
    from slime_core.cli.run import run_command
    from slime_core.loop.run_dir import read_metrics
    from slime_core.plugins import Plugins

    data = tmp_path / "addition.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}=", "label": str(a + b)}) + "\n" for a in range(5) for b in range(5))
    )
    flags = [
        "--prompt-data",
        str(data),
        "--input-key",
        "prompt",
        "--label-key",
        "label",
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--train-backend",
        "megatron",
        "--use-dynamic-batch-size",
        "--max-tokens-per-gpu",
        "4096",
        "--rollout-engine",
        "cpu",
        "--rm-type",
        "exact_match",
        "--advantage-estimator",
        "grpo",
        "--num-rollout",
        "2",
        "--rollout-batch-size",
        "4",
        "--n-samples-per-prompt",
        "4",
        "--rollout-max-response-len",
        "8",
        "--lr",
        "1e-3",
        "--colocate",
        "--check-weight-update-equal",
        "--output-dir",
        str(tmp_path / "run"),
        "--tensor-model-parallel-size",
        "2",
        "--actor-num-gpus-per-node",
        "2",
        "--rollout-num-gpus",
        "1",
    ]
    assert run_command(flags, Plugins()) == 0
    records = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["rollout_id"] >= 0]
    assert [r["rollout_id"] for r in records] == [0, 1]
    last = records[-1]
    assert last["weight_version"] == 2 and last["weight_update/bytes"] > 0
    assert last["weight_update/max_logprob_diff"] < 1e-3  # the engine holds exactly the trainer's weights


def test_moe_tensor_parallelism_without_sequence_parallelism_is_refused_with_the_fix():
    moe_tp2 = dict(num_experts=4, model_type="qwen3_moe"), dict(tensor_model_parallel_size=2)
    with pytest.raises(ValueError, match="add --sequence-parallel"):
        check_layout(moe_tp2[0], SimpleNamespace(**moe_tp2[1], sequence_parallel=False), "the model")
    check_layout(moe_tp2[0], SimpleNamespace(**moe_tp2[1], sequence_parallel=True), "the model")


# ---------------------------------------------------------------- context parallelism

CP_ROLLOUTS = 2


def long_tailed_batch(seed: int):
    """16 samples whose responses have 1 to 40 tokens: rows of very different lengths, so
    some samples lie in one rank's chunks only and others across both."""
    return rollout_batch(seed=seed, max_response=40)


def cp_run(config, num_ranks: int, save: bool = False) -> SimpleNamespace:
    """Log-probs of a long-tailed batch, then `CP_ROLLOUTS` rollouts of training (with a
    checkpoint after the first with ``save``): metrics and final weights."""
    group = start(config, num_ranks)
    try:
        log_probs = group.compute_log_probs(long_tailed_batch(0))
        metrics = [group.train(0, long_tailed_batch(0))]
        if save:
            group.call("save", 0)
        metrics += [group.train(i, long_tailed_batch(i)) for i in range(1, CP_ROLLOUTS)]
        return SimpleNamespace(log_probs=log_probs, metrics=metrics, weights=all_weights(group))
    finally:
        group.shutdown()


def assert_scores_and_trains_like(got, want, weights_atol: float = 1e-5) -> None:
    for mine, theirs in zip(got.log_probs, want.log_probs, strict=True):
        torch.testing.assert_close(torch.tensor(mine), torch.tensor(theirs), rtol=1e-5, atol=1e-5)
    assert_trains_like(got, want, weights_atol)


#: GSPO (a sequence-level ratio: a sample's tokens on both CP ranks enter one mean) with KL and entropy
CP_SETTINGS = dict(advantage_estimator="gspo", rollout_max_response_len=40)


@pytest.fixture(scope="session")
def cp_one_rank(ray_cluster, megatron_config):
    return cp_run(megatron_config(**CP_SETTINGS), 1)


@pytest.fixture(scope="session")
def cp_two_ranks(ray_cluster, megatron_config, tmp_path_factory):
    """CP 2 on two ranks, saving after the first rollout."""
    checkpoint = tmp_path_factory.mktemp("megatron-cp-ckpt") / "ckpt"
    config = megatron_config(**CP_SETTINGS, actor_num_gpus_per_node=2, context_parallel_size=2, save=str(checkpoint))
    return SimpleNamespace(**vars(cp_run(config, 2, save=True)), checkpoint=checkpoint)


def test_context_parallel_ranks_score_and_train_like_one_rank(cp_one_rank, cp_two_ranks):
    """Each row split over two CP ranks (zigzag chunks): the one-rank log-probs, GSPO loss,
    KL, entropy, gradient norm and weights. Fails if a chunk's rotary positions or causal
    mask are not its global ones, if a shard's last token is not scored against the next
    global token, if a sample's sequence-level terms are computed per shard, or if the
    gradients are not summed over the CP ranks."""
    assert_scores_and_trains_like(cp_two_ranks, cp_one_rank)


def test_tensor_and_context_parallel_ranks_train_like_one_rank(cp_one_rank, megatron_config):
    """TP 2 (with sequence parallelism) × CP 2 on four ranks, the optimizer state sharded over
    the data × context-parallel ranks (distributed optimizer): the one-rank run (weights to
    5e-5 after two Adam steps at lr 1e-3: Adam's per-element normalisation turns the summation
    order's float noise in a near-zero gradient into a visible step)."""
    config = megatron_config(
        **CP_SETTINGS,
        actor_num_gpus_per_node=4,
        tensor_model_parallel_size=2,
        sequence_parallel=True,
        context_parallel_size=2,
        use_distributed_optimizer=True,
    )
    assert_scores_and_trains_like(cp_run(config, 4), cp_one_rank, weights_atol=5e-5)


def test_resuming_a_context_parallel_checkpoint_continues_exactly(cp_two_ranks, megatron_config):
    """CP 2 resumed after rollout 0 ends with the uninterrupted CP-2 run's weights, bit for bit."""
    config = megatron_config(
        **CP_SETTINGS, actor_num_gpus_per_node=2, context_parallel_size=2, load=str(cp_two_ranks.checkpoint)
    )
    group = TrainGroup(MegatronTrainRank, config, 2)
    try:
        assert group.init() == {"rollout_id": 1, "weight_version": 1}
        metrics = [group.train(i, long_tailed_batch(i)) for i in range(1, CP_ROLLOUTS)]
        weights = all_weights(group)
    finally:
        group.shutdown()
    assert metrics == cp_two_ranks.metrics[1:]
    for name in cp_two_ranks.weights:
        assert torch.equal(weights[name], cp_two_ranks.weights[name]), name


def test_a_moe_model_on_context_parallel_ranks_trains_like_one_rank(megatron_config, tiny_moe_model_dir, ray_cluster):
    """The tiny Qwen3-MoE (GRPO, KL, entropy) with CP 2: the one-rank log-probs, loss curve and weights."""
    settings = dict(rollout_max_response_len=40)
    want = cp_run(megatron_config(tiny_moe_model_dir, **settings), 1)
    config = megatron_config(tiny_moe_model_dir, **settings, actor_num_gpus_per_node=2, context_parallel_size=2)
    assert_scores_and_trains_like(cp_run(config, 2), want)


# ---------------------------------------------------------------- vocabulary-parallel log-probs


def _vocab_parallel_rank(rank: int, sizes):
    from megatron.core import parallel_state

    from slime_core.algorithms import nucleus_keep_mask
    from slime_megatron.logprobs import vocab_parallel_entropy, vocab_parallel_log_probs

    group = parallel_state.get_tensor_model_parallel_group()
    logits, targets = _logits()
    local = logits[:, rank * 64 : (rank + 1) * 64].clone().requires_grad_()
    log_probs = vocab_parallel_log_probs(local, targets, 0.7, group, vocab_size=100)
    entropy = vocab_parallel_entropy(local, 0.7, group, vocab_size=100)
    (1.3 * log_probs.sum() + 0.4 * entropy.sum()).backward()
    masked = logits[:, rank * 64 : (rank + 1) * 64].clone().requires_grad_()  # top-p replay: this rank's slice
    keep = nucleus_keep_mask(*_nuclei(), targets, 64, vocab_start=rank * 64)
    masked_log_probs = vocab_parallel_log_probs(masked, targets, 0.7, group, vocab_size=100, keep=keep)
    (1.3 * masked_log_probs.sum()).backward()
    return log_probs.detach(), entropy.detach(), local.grad, masked_log_probs.detach(), masked.grad


def _logits():
    """(6, 128) logits of a 100-token vocabulary padded to 128 (as Megatron pads it), targets."""
    generator = torch.Generator().manual_seed(0)
    return torch.randn(6, 128, generator=generator) * 3, torch.randint(0, 100, (6,), generator=generator)


def _nuclei():
    """Top-p nuclei of the 6 tokens (one sample): across both ranks' slices, wholly in one,
    none (tool output), ...; each row's target is kept too."""
    nuclei = [[3, 5, 80], [70], [], [99, 1], [63, 65], [63, 2, 4]]
    offsets = [0]
    for nucleus in nuclei:
        offsets.append(offsets[-1] + len(nucleus))
    return [[t for nucleus in nuclei for t in nucleus]], [offsets]


def test_vocab_parallel_log_probs_and_entropy_equal_the_full_vocabulary_ones(run_ranks):
    """Two tensor-parallel ranks with half the vocabulary each: the values and the gradients
    of log π(y) and the entropy equal those of the whole (unpadded) vocabulary on one process;
    so do the log-probs over top-p nuclei, each rank masking its slice."""
    from slime_core.algorithms import entropy_from_logits, log_probs_from_logits, nucleus_keep_mask

    results = run_ranks(_vocab_parallel_rank, 2, tp=2)  # spawned: a fork can crash under Ray
    logits, targets = _logits()
    full = logits[:, :100].clone().requires_grad_()
    log_probs, entropy = log_probs_from_logits(full, targets, 0.7), entropy_from_logits(full, 0.7)
    (1.3 * log_probs.sum() + 0.4 * entropy.sum()).backward()
    grad = torch.cat([full.grad, torch.zeros(6, 28)], dim=1)  # padding ids get no gradient
    for rank in (0, 1):
        torch.testing.assert_close(results[rank][0], log_probs.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(results[rank][1], entropy.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(results[rank][2], grad[:, rank * 64 : (rank + 1) * 64], rtol=1e-5, atol=1e-6)
    full = logits[:, :100].clone().requires_grad_()
    masked = log_probs_from_logits(full, targets, 0.7, keep_mask=nucleus_keep_mask(*_nuclei(), targets, 100))
    (1.3 * masked.sum()).backward()
    assert (masked > log_probs.detach()).any()  # renormalised over the nuclei
    grad = torch.cat([full.grad, torch.zeros(6, 28)], dim=1)
    for rank in (0, 1):
        torch.testing.assert_close(results[rank][3], masked.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(results[rank][4], grad[:, rank * 64 : (rank + 1) * 64], rtol=1e-5, atol=1e-6)
