"""The FSDP backend on a CUDA device: varlen flash attention for packed rows, nccl, bf16.

These run one rank in this process (no Ray), which is what a GPU rank does inside its actor.
Skipped cleanly without CUDA (the ``gpu`` marker).
"""

import functools
import gzip
import json

import pytest
import torch

from slime_core.cluster.ports import free_port
from slime_core.testing import synthetic_rollout_batch
from slime_core.tools.tiny_models import build_tiny_qwen3
from slime_fsdp import attention, inputs
from slime_fsdp.model import load_model

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu_model_dir(tmp_path_factory):
    """Head dim 32: the flash kernels want a multiple of 8."""
    return build_tiny_qwen3(tmp_path_factory.mktemp("gpu-qwen3"), hidden_size=128, num_layers=2, max_positions=512)


def test_packed_rows_run_one_varlen_flash_call_per_layer_and_match_padded_rows(gpu_model_dir, monkeypatch):
    calls = []
    kernel = attention._varlen_attn()
    assert kernel is not None, "this torch has no torch.nn.attention.varlen"

    @functools.wraps(kernel)  # keeps the kernel's signature, which `attention` reads
    def counted(*args, **kwargs):
        calls.append(args[3].tolist())
        return kernel(*args, **kwargs)

    monkeypatch.setattr(attention, "_varlen_attn", lambda: counted)
    ours = load_model(gpu_model_dir, dtype=torch.bfloat16).cuda()
    reference = load_model(gpu_model_dir, dtype=torch.bfloat16, attn_implementation="eager").cuda()
    batch = synthetic_rollout_batch(num_groups=3, max_response=40, seed=1)
    with torch.no_grad():
        packed = inputs.packed(batch.tokens, batch.response_lengths, "cuda", attention.NAME)
        got = inputs.response_log_probs(ours(**packed.model_inputs()).logits, packed, 1.0)
        padded = inputs.padded(batch.tokens, batch.response_lengths, "cuda", 0)
        want = inputs.response_log_probs(reference(**padded.model_inputs()).logits, padded, 1.0)
    lengths = [len(t) for t in batch.tokens]
    assert len(calls) == ours.config.num_hidden_layers
    assert calls[0] == torch.tensor([0] + lengths).cumsum(0).tolist()
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0.0, atol=0.1)  # bf16: same math, different kernels
    assert max((a - b).abs().mean().item() for a, b in zip(got, want)) < 0.02


@pytest.fixture
def gpu_rank(gpu_model_dir, prompt_file):
    import torch.distributed as dist

    from slime_core.testing import make_config
    from slime_fsdp.rank import FSDPTrainRank

    def start(**overrides):
        config = make_config(
            prompt_file,
            gpu_model_dir,
            train_backend="fsdp",
            rollout_batch_size=3,
            n_samples_per_prompt=4,
            num_steps_per_rollout=1,
            lr=1e-3,
            rollout_max_response_len=40,
            **overrides,
        )
        rank = FSDPTrainRank(config, 0, 1, "127.0.0.1", free_port())
        rank.init()
        return rank

    yield start
    if dist.is_initialized():
        dist.destroy_process_group()


def test_one_rank_trains_on_cuda_with_nccl_in_bf16(gpu_rank):
    import torch.distributed as dist

    rank = gpu_rank(bf16=True, use_dynamic_batch_size=True, max_tokens_per_gpu=256, use_kl_loss=True, kl_loss_coef=0.0)
    assert rank.device.type == "cuda" and "nccl" in str(dist.get_backend_config())
    assert all(p.device.type == "cuda" for p in rank.model.parameters())
    batch = synthetic_rollout_batch(num_groups=3, max_response=40, seed=2)
    before = rank.compute_log_probs(batch)
    assert rank.compute_log_probs(batch, "ref") == before
    assert rank.start_train(0, batch) == 1
    rank.train_step(0)
    first = rank.finish_train()
    assert first["ppo_kl"] == pytest.approx(0.0, abs=1e-6) and first["grad_norm"] > 0
    after = rank.compute_log_probs(batch)
    assert after != before
    exported = [pair for index in range(rank.weight_buckets(1 << 20)) for pair in rank.export_bucket(index)]
    names = {name for name, _ in exported}
    assert "model.embed_tokens.weight" in names and all(t.device.type == "cpu" for _, t in exported)
    assert rank.memory()["peak_gib"] > 0
    loaded = rank.memory()["allocated_gib"]
    state_gib = sum(t.numel() * t.element_size() for t in _model_and_optimizer_tensors(rank)) / 2**30
    rank.offload()
    assert all(t.device.type == "cpu" for t in _model_and_optimizer_tensors(rank))
    assert rank.memory()["allocated_gib"] <= loaded - state_gib + 1e-6
    rank.onload()
    assert rank.compute_log_probs(batch) == after


def _model_and_optimizer_tensors(rank) -> list[torch.Tensor]:
    local = lambda t: t.to_local() if hasattr(t, "to_local") else t  # noqa: E731
    states = [v for state in rank.optimizer.state.values() for v in state.values() if torch.is_tensor(v) and v.dim()]
    return [local(p) for p in rank.model.parameters()] + [local(v) for v in states]


def test_compiled_layers_give_the_eager_log_probs_and_gradient(gpu_rank):
    """--fsdp-torch-compile: every layer's forward is compiled, the packed rows' log-probs and
    the first step's gradient norm equal the eager rank's to bf16 precision."""
    import torch.distributed as dist

    batch = synthetic_rollout_batch(num_groups=3, max_response=40, seed=3)
    results = []
    for compiled in (False, True):
        rank = gpu_rank(bf16=True, use_dynamic_batch_size=True, max_tokens_per_gpu=256, fsdp_torch_compile=compiled)
        layers = [layer.forward for layer in rank.model.model.layers]
        assert all(hasattr(forward, "_torchdynamo_orig_callable") for forward in layers) == compiled
        log_probs = rank.compute_log_probs(batch)
        rank.start_train(0, batch)
        results.append((log_probs, rank.train_step(0)["grad_norm"]))
        rank.finish_train()
        dist.destroy_process_group()
    (eager, eager_norm), (compiled, compiled_norm) = results
    for a, b in zip(eager, compiled):
        torch.testing.assert_close(torch.tensor(b), torch.tensor(a), rtol=0.0, atol=0.1)
    assert compiled_norm == pytest.approx(eager_norm, rel=0.05)


def test_cuda_memory_snapshot_and_profiler_trace_of_a_rollout(gpu_rank, tmp_path):
    """--record-memory-history (torch recorder): the CUDA allocator's history is dumped once the
    rollout --memory-snapshot-num-steps - 1 has trained, under the run directory; a train_actor
    trace holds the CUDA kernels that ran."""
    import pickle

    rank = gpu_rank(
        output_dir=str(tmp_path),
        record_memory_history=True,
        memory_snapshot_num_steps=1,
        memory_snapshot_dir="snapshots",
        use_pytorch_profiler=True,
        profile_target=["train_actor"],
        profile_step_start=0,
        profile_step_end=2,
        use_dynamic_batch_size=True,
        max_tokens_per_gpu=256,
    )
    batch = synthetic_rollout_batch(num_groups=3, max_response=40, seed=4)
    rank.start_train(0, batch)
    rank.train_step(0)
    rank.finish_train()
    (snapshot,) = (tmp_path / "snapshots").glob("memory_snapshot_time*_rank0_snapshot.pickle")
    recorded = pickle.loads(snapshot.read_bytes())
    assert recorded["segments"] and any(trace for trace in recorded["device_traces"])
    assert any(event["action"] == "alloc" for trace in recorded["device_traces"] for event in trace)
    (trace,) = (tmp_path / "tensorboard").glob("train_actor_rank_0.*.pt.trace.json.gz")
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert any(event.get("cat") == "kernel" for event in events)
