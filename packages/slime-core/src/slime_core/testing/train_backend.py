"""Checks a train backend's tests share: one rollout trained, a resume that is bit-exact, one
GPU train step against transformers' own log-probs, actor and reference log-probs per config."""

from __future__ import annotations

import contextlib
from pathlib import Path

from slime_core.testing.batches import synthetic_rollout_batch
from slime_core.testing.config import make_config
from slime_core.testing.models import log_probs_alone


def train_one_rollout(group, batch) -> tuple[list[list[float]], dict, list[str]]:
    """A train group's log-probs of ``batch`` before training, the metrics of one rollout
    trained on it, and the (Hugging Face) names of the weights that changed."""
    import torch

    def weights() -> dict:
        return {name: tensor.clone() for bucket in group.export_weights(1 << 24) for name, tensor in bucket}

    log_probs, before = group.compute_log_probs(batch), weights()
    metrics = group.train(0, batch)
    after = weights()
    return log_probs, metrics, [name for name in before if not torch.equal(before[name], after[name])]


#: What a resumed rank must reproduce bit for bit (`check_rank_resume`).
RESUME_METRICS = ("loss", "pg_loss", "entropy", "grad_norm", "lr")


def check_rank_resume(rank_class, teardown, prompts: Path, tmp_path: Path, family: str, **options) -> None:
    """Assert that a ``rank_class`` rank resumed from its checkpoint trains a ``family`` model on
    bit for bit: one rank in this process trains rollout 0, saves, and trains rollout 1; a fresh
    rank resumes and trains rollout 1 again (same metrics, same weights). The fresh rank starts
    from another random model of the family (its routers' correction biases too), so any state
    the checkpoint misses comes from that model and differs. ``teardown()`` destroys the
    backend's process groups after each rank, so the next one can build its own."""
    import torch

    from slime_core.tools.tiny_models import build_tiny_model
    from slime_core.train_backend import TrainGroup

    @contextlib.contextmanager
    def rank(model_dir, **more):
        try:
            group = TrainGroup(rank_class, make_config(prompts, model_dir, **options, **more), 1, in_process=True)
            yield group, group.init()
        finally:
            teardown()

    def trained(group, rollout_id: int):
        metrics = group.train(rollout_id, synthetic_rollout_batch(seed=rollout_id))
        weights = {name: tensor for bucket in group.export_weights(1 << 20) for name, tensor in bucket}
        return {key: metrics[key] for key in RESUME_METRICS}, weights

    start = build_tiny_model(tmp_path / "start", family, hidden_size=32, router_bias=0.3)
    other = build_tiny_model(tmp_path / "other", family, hidden_size=32, seed=1, router_bias=0.3)
    with rank(start, save=str(tmp_path / "ckpt")) as (group, _):
        group.train(0, synthetic_rollout_batch(seed=0))
        group.save(0)
        want_metrics, want_weights = trained(group, 1)
    with rank(other, load=str(tmp_path / "ckpt")) as (group, state):
        assert state == {"rollout_id": 1, "weight_version": 1}
        metrics, weights = trained(group, 1)
    assert metrics == want_metrics
    assert weights.keys() == want_weights.keys()
    different = [name for name in weights if not torch.equal(weights[name], want_weights[name])]
    assert not different, f"not bit-exact after the resume: {different}"


def check_teacher_temperature(rank_class, teardown, prompts: Path, tmp_path: Path, **options) -> None:
    """Assert that a ``rank_class`` rank in this process takes a distillation teacher's
    log-probs at temperature 1 whatever ``--rollout-temperature`` (here 0.5), as SGLang scores
    the prompt tokens a teacher engine is sent (slime's OPD reward), while the actor's are at
    0.5: each against one forward of the Hugging Face model alone (`log_probs_alone`) on the
    ``qwen2`` tiny model the rank loads as actor and as teacher."""
    import torch
    from transformers import AutoModelForCausalLM

    from slime_core.tools.tiny_models import build_tiny_model
    from slime_core.train_backend import TrainGroup

    model_dir = build_tiny_model(tmp_path / "model", "qwen2", hidden_size=32)
    batch = synthetic_rollout_batch(seed=0)  # 4 groups of 4
    teacher_options = dict(rollout_temperature=0.5, opd_teacher_load=str(model_dir), opd_kl_coef=0.0)
    config = make_config(prompts, model_dir, rollout_batch_size=4, n_samples_per_prompt=4, **teacher_options, **options)
    try:
        group = TrainGroup(rank_class, config, 1, in_process=True)
        group.init()
        teacher, actor = group.compute_log_probs(batch, "teacher"), group.compute_log_probs(batch)
    finally:
        teardown()
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    cooled = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        cooled.lm_head.weight.mul_(2.0)  # logits / 0.5
    for i, (tokens, response_length) in enumerate(zip(batch.tokens, batch.response_lengths)):
        plain, at_half = (log_probs_alone(m, tokens, response_length) for m in (model, cooled))
        torch.testing.assert_close(torch.tensor(teacher[i]), plain, atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.tensor(actor[i]), at_half, atol=1e-4, rtol=0)


def check_gpu_train_step(rank_class, teardown, prompts: Path, tmp_path: Path, family: str, **options) -> None:
    """Assert one bf16 train step of a tiny ``family`` model (hidden size 128: head dims the
    flash kernels take) on one CUDA GPU through a ``rank_class`` rank in this process: its
    log-probs before the step are transformers' own in float32 to bf16 precision, the loss is
    finite, the gradient is not zero and the weights move. ``teardown()`` destroys the
    backend's process groups after."""
    import torch
    from transformers import AutoModelForCausalLM

    from slime_core.tools.tiny_models import build_tiny_model
    from slime_core.train_backend import TrainGroup

    model_dir = build_tiny_model(tmp_path / family, family, hidden_size=128, max_positions=512)
    batch = synthetic_rollout_batch(num_groups=2, max_response=24, seed=1)
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    expected = [log_probs_alone(reference, t, r).cpu() for t, r in zip(batch.tokens, batch.response_lengths)]
    del reference
    try:
        group = TrainGroup(rank_class, make_config(prompts, model_dir, **options), 1, in_process=True)
        group.init()
        assert torch.cuda.memory_allocated() > 0  # the rank's weights are on the GPU
        log_probs, metrics, moved = train_one_rollout(group, batch)
    finally:
        teardown()
    for got, want in zip(log_probs, expected):
        torch.testing.assert_close(torch.tensor(got), want, rtol=0.0, atol=0.1)  # bf16 against float32
    assert max((torch.tensor(got) - want).abs().mean().item() for got, want in zip(log_probs, expected)) < 0.02
    assert torch.isfinite(torch.tensor(metrics["loss"])) and metrics["grad_norm"] > 0
    assert "model.embed_tokens.weight" in moved


def destroy_default_group() -> None:
    """Destroy torch's default process group if one is up (the FSDP backend's teardown between
    ranks built in one process)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def actor_and_reference_log_probs(rank_class, teardown, rank: int, world_size: int, port: int, configs) -> list:
    """Per config: the (actor, reference) log-probs of one synthetic rollout batch on a fresh
    ``rank_class`` rank (a `slime_core.rank.processes.spawn_ranks` target's body);
    ``teardown()`` destroys the backend's process groups after each."""
    from slime_core.cluster.network import LOOPBACK

    results = []
    for config in configs:
        train_rank = rank_class(config, rank, world_size, LOOPBACK, port)
        try:
            train_rank.init()
            batch = synthetic_rollout_batch(seed=0)
            results.append((train_rank.compute_log_probs(batch), train_rank.compute_log_probs(batch, "ref")))
        finally:
            teardown()
    return results
