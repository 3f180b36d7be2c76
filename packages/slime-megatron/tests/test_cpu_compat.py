"""The CPU compatibility layer: its shims in isolation, then a real tensor-parallel training
step (distributed optimizer, full recomputation, megatron's schedule) and a distributed
checkpoint on gloo, resumed by a different number of ranks."""

import pytest
import torch

from slime_megatron import cpu_compat

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU mode is only for machines without CUDA")


def test_cpu_mode_patches_only_the_listed_megatron_modules():
    cpu_compat.enable_cpu_mode()
    cpu_compat.enable_cpu_mode()  # idempotent
    from megatron.core.transformer import utils

    assert utils.get_default_causal_mask(3).device.type == "cpu"  # torch.ones(..., device="cuda") inside
    assert utils.torch is cpu_compat.cpu_torch
    assert cpu_compat.cpu_torch.cuda.current_device() == torch.device("cpu")
    with pytest.raises((AssertionError, RuntimeError)):  # the real torch is untouched
        torch.cuda.current_device()


def test_megatron_s_jit_fused_functions_run_eagerly_in_cpu_mode():
    """``jit_fuser`` is torch.compile: compiling the MoE router's functions took 2.2 s of a
    rank's first step on CPU. In CPU mode no megatron module holds a compiled wrapper, and
    calling a fused function compiles nothing."""
    import sys

    from torch._dynamo.utils import counters

    cpu_compat.enable_cpu_mode()
    from megatron.core.fusions import fused_bias_swiglu
    from megatron.core.transformer.moe.router import TopKRouter

    held = [
        f"{name}.{key}"
        for name, module in list(sys.modules.items())
        if name.startswith("megatron.") and module
        for key, value in vars(module).items()
        if cpu_compat.compiled_original(value)
    ]
    assert held == []
    assert cpu_compat.compiled_original(TopKRouter._apply_expert_bias) is None
    frames = counters["frames"]["total"]
    y = torch.randn(3, 8)
    torch.testing.assert_close(fused_bias_swiglu.swiglu(y), torch.nn.functional.silu(y[:, :4]) * y[:, 4:])
    assert counters["frames"]["total"] == frames


def test_megatron_is_imported_without_torch_s_compiler_and_wandb_in_cpu_mode():
    """`import_megatron` (a rank's first import of megatron on CPU): ``torch.compile`` is a
    no-op while megatron binds its ``jit_fuser``, so torch's inductor is never imported and the
    fused functions stay plain; W&B stays out of megatron's inference code, and imports
    normally afterwards. In a fresh interpreter: this one imported megatron already."""
    import subprocess
    import sys

    code = """
import sys, torch
from slime_megatron.cpu_compat import compiled_original, import_megatron
import_megatron()
from megatron.core.fusions import fused_bias_swiglu
import wandb
print(sorted(m for m in ("torch._inductor.compile_fx", "wandb.sdk") if m in sys.modules),
      compiled_original(fused_bias_swiglu.swiglu) is None, torch.compile.__module__)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["['wandb.sdk']", "True", "torch"]


def test_cuda_type_names_only_inside_the_context():
    tensor = torch.zeros(2)
    with cpu_compat.cuda_type_names():
        assert tensor.type() == "torch.cuda.FloatTensor"
        assert torch.nn.Parameter(tensor.bfloat16()).type() == "torch.cuda.BFloat16Tensor"
        assert tensor.type(torch.float64).dtype == torch.float64  # conversions unchanged
    assert tensor.type() == "torch.FloatTensor"


def test_rng_tracker_forks_named_streams_and_restores_the_outer_one():
    tracker = cpu_compat.CpuRNGStatesTracker()
    tracker.add("model-parallel-rng", 7)
    torch.manual_seed(0)
    outer = torch.get_rng_state()
    with tracker.fork():
        first = torch.rand(3)
    assert torch.equal(torch.get_rng_state(), outer)
    with tracker.fork():
        second = torch.rand(3)  # the stream goes on
    assert torch.equal(first, torch.rand(3, generator=torch.Generator().manual_seed(7)))
    assert not torch.equal(first, second)
    with pytest.raises(ValueError, match="already tracked"):
        tracker.add("model-parallel-rng", 8)


# ------------------------------------------------------------------ a real training step


def _train_step(model, optimizer, tokens):
    """One optimizer step of next-token cross-entropy through megatron's schedule."""
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    def forward_step(data, net):
        batch = next(data)
        logits = net(batch[:, :-1], torch.arange(batch.shape[1] - 1).expand(batch.shape[0], -1), None)
        loss = vocab_parallel_cross_entropy(logits.float(), batch[:, 1:]).mean()
        return loss, lambda output: (output, {"loss": output.detach()})

    optimizer.zero_grad()
    model.zero_grad_buffer()
    get_forward_backward_func()(
        forward_step_func=forward_step,
        data_iterator=iter([tokens]),
        model=[model],
        num_microbatches=1,
        seq_length=tokens.shape[1] - 1,
        micro_batch_size=tokens.shape[0],
    )
    updated, grad_norm, _ = optimizer.step()
    assert updated and grad_norm > 0


def _model_and_optimizer(sizes, hf_config, source, distributed_optimizer):
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    from slime_megatron.models import build_model, load_hf_weights

    module = build_model(hf_config, sizes)
    load_hf_weights(module, source, hf_config)
    module.config.finalize_model_grads_func = finalize_model_grads
    model = DistributedDataParallel(
        module.config,
        DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=distributed_optimizer),
        module,
    )
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-2, clip_grad=1e-3, use_distributed_optimizer=distributed_optimizer),
        [model],
    )
    return model, optimizer


def _step_save_step(rank, sizes, hf_config, source, tokens, root):
    from slime_megatron.checkpoint import save_checkpoint
    from slime_megatron.models import export_hf_weights

    model, optimizer = _model_and_optimizer(sizes, hf_config, source, distributed_optimizer=True)
    _train_step(model, optimizer, tokens)
    save_checkpoint(root, 1, model, optimizer, {"rank": rank})
    _train_step(model, optimizer, tokens)
    return dict(export_hf_weights(model, hf_config))


def _save_alone(rank, sizes, hf_config, source, tokens, root):
    """Save a checkpoint; the processes it left running (the pool's process may hold others)."""
    import multiprocessing

    from slime_megatron.checkpoint import save_checkpoint

    model, optimizer = _model_and_optimizer(sizes, hf_config, source, distributed_optimizer=True)
    _train_step(model, optimizer, tokens)
    before = {child.pid for child in multiprocessing.active_children()}
    save_checkpoint(root, 0, model, optimizer)
    return [child.name for child in multiprocessing.active_children() if child.pid not in before]


def test_a_checkpoint_is_written_without_a_helper_process(tiny_hf, run_ranks, tmp_path):
    """megatron's writer collects its results through a spawned multiprocessing Manager when
    it may save asynchronously (a fresh interpreter: ~2 s of a rank's first save); slime's
    synchronous save leaves no process behind."""
    hf = tiny_hf.model("qwen3")
    tokens = torch.randint(0, 100, (2, 9), generator=torch.Generator().manual_seed(2))
    children = run_ranks(_save_alone, 1, hf.config, hf.state_dict(), tokens, str(tmp_path / "ckpt"))
    assert children == [[]]
    assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text() == "0"


def _resume_step(rank, sizes, hf_config, source, tokens, root):
    from slime_core.checkpoint.directory import latest_checkpoint
    from slime_megatron.checkpoint import load_checkpoint
    from slime_megatron.models import export_hf_weights

    model, optimizer = _model_and_optimizer(sizes, hf_config, source, distributed_optimizer=True)
    extra = load_checkpoint(latest_checkpoint(root), model, optimizer)
    _train_step(model, optimizer, tokens)
    return extra, dict(export_hf_weights(model, hf_config))


def test_tensor_parallel_step_and_checkpoint_resume_on_one_rank(tiny_hf, run_ranks, tmp_path):
    """TP=2 with the distributed optimizer and full recomputation takes a step, saves, takes
    another; one rank loads that checkpoint (resharded) and takes the same second step."""
    hf = tiny_hf.model("qwen3")
    tokens = torch.randint(0, 100, (2, 9), generator=torch.Generator().manual_seed(2))
    root = str(tmp_path / "ckpt")
    recompute = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    after_two = run_ranks(_step_save_step, 2, hf.config, hf.state_dict(), tokens, root, tp=2, **recompute)
    assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text() == "1"
    extra, resumed = run_ranks(_resume_step, 1, hf.config, hf.state_dict(), tokens, root)[0]
    assert extra == {"rank": 0}
    moved = [name for name in resumed if not torch.equal(resumed[name], hf.state_dict().get(name, resumed[name]))]
    assert moved, "the steps changed no weight"
    for name, tensor in after_two[0].items():
        torch.testing.assert_close(resumed[name], tensor, atol=1e-5, rtol=1e-4, msg=name)
