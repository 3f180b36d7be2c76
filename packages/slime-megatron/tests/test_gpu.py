"""The Megatron backend on CUDA GPUs (nccl, bf16): a ~0.5B-parameter random-init Qwen3 trains
a few steps with tensor parallelism over the visible GPUs (TP 1 on a single GPU) and with the
distributed optimizer (data parallel over the GPUs); each prints training tokens/s and model
FLOPs utilisation (6 · parameters · tokens per step against the GPUs' dense bf16 peak,
``SLIME_PEAK_TFLOPS`` per GPU, default the H100 SXM's 989; the step's no-grad old-log-prob
pass and attention are not counted, as in ``benchmarks/fsdp_gpu.py``).

Ranks are Ray actors with one GPU each, as in a real run. Skipped cleanly without CUDA (the
``gpu`` marker).
"""

import json
import math
import os
import time

import pytest
import torch

from slime_core.testing import make_config, synthetic_rollout_batch
from slime_core.tools.tiny_models import build_char_tokenizer
from slime_core.train_backend import TrainGroup

pytestmark = pytest.mark.gpu

PEAK_TFLOPS = float(os.environ.get("SLIME_PEAK_TFLOPS", "989"))
TIMED_STEPS = 3


@pytest.fixture(scope="module")
def qwen3_half_billion(tmp_path_factory):
    """A random Qwen3 with Qwen3's vocabulary, hidden 1024, 24 layers (about 0.46 B
    parameters, tied embeddings) and the character tokenizer; its directory and size."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    path = tmp_path_factory.mktemp("qwen3-0.5b")
    tokenizer = build_char_tokenizer(path)
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=24,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=64,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    model.save_pretrained(path)
    (path / "prompts.jsonl").write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    return path, sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("variant", ["tensor_parallel", "distributed_optimizer"])
def test_half_billion_qwen3_trains_and_reports_throughput(ray_cluster, qwen3_half_billion, variant):
    from slime_megatron.rank import MegatronTrainRank

    path, num_params = qwen3_half_billion
    gpus = torch.cuda.device_count()
    layout = (
        dict(tensor_model_parallel_size=gpus) if variant == "tensor_parallel" else dict(use_distributed_optimizer=True)
    )
    config = make_config(
        path / "prompts.jsonl",
        path,
        train_backend="megatron",
        bf16=True,
        rollout_batch_size=8,
        n_samples_per_prompt=8,
        num_steps_per_rollout=1,
        micro_batch_size=8,
        lr=1e-5,
        rollout_max_response_len=512,
        calculate_per_token_loss=True,
        actor_num_gpus_per_node=gpus,
        **layout,
    )
    batch = synthetic_rollout_batch(num_groups=8, group_size=8, max_response=512)
    group = TrainGroup(MegatronTrainRank, config, gpus, num_gpus_per_rank=1)
    try:
        group.init()
        probe = batch.select(list(range(8 * gpus)))
        before = group.compute_log_probs(probe)
        group.train(0, batch)  # warm-up: allocator, kernels
        start = time.perf_counter()
        metrics = [group.train(step, batch) for step in range(1, TIMED_STEPS + 1)]
        seconds = (time.perf_counter() - start) / TIMED_STEPS
        after = group.compute_log_probs(probe)
        peak_gib = max(m["peak_gib"] for m in group.call("memory"))
    finally:
        group.shutdown()
    tokens = sum(len(t) for t in batch.tokens)
    mfu = 6 * num_params * tokens / seconds / (PEAK_TFLOPS * 1e12 * gpus)
    print(
        f"\nmegatron {variant}: {num_params / 1e9:.2f} B params, {gpus} GPU(s), {seconds:.3f} s/step, "
        f"{tokens / seconds:,.0f} tokens/s, MFU {mfu:.1%}, peak {peak_gib:.1f} GiB"
    )
    assert all(math.isfinite(m["loss"]) and m["grad_norm"] > 0 for m in metrics)
    assert after != before  # the weights moved
    assert mfu > 0.005  # far below any real GPU's rate means the run was not on the GPU
