"""Megatron's data-parallel wrapper and optimizer around a GPTModel, set up for slime's loss.

- ``DistributedDataParallel`` keeps gradients in contiguous float32 buffers and reduces them
  over the data-parallel group once per optimizer step, in ``finalize_model_grads``; the
  model config must name that function (``finalize_model_grads_func``), or the schedule
  never calls it and every data-parallel rank steps on its own gradients.
- ``get_megatron_optimizer``: Adam with decoupled weight decay (AdamW) over every parameter
  (``config_overrides={}``: no exemption for norms and biases, as the FSDP backend), gradient
  clipping to ``--clip-grad``, the distributed optimizer with ``--use-distributed-optimizer``.
  The learning rate is set before each step from slime's schedule (`set_lr`), so both
  backends follow ``slime_core.rank.step.lr_factor``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from slime_megatron.chunks import ModelChunks

if TYPE_CHECKING:
    from slime_core.config.config import Config


def wrap(modules: list, config: Config) -> ModelChunks:
    """Each model chunk of ``modules`` in Megatron's DDP; the model config set up for the
    forward-backward schedule."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads

    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=config.use_distributed_optimizer
    )
    chunks = ModelChunks()
    for module in modules:
        chunks.append(DistributedDataParallel(config=module.config, ddp_config=ddp_config, module=module))
        module.config.finalize_model_grads_func = finalize_model_grads
        module.config.variable_seq_lengths = _variable_shapes(module.config)
    return chunks


def _variable_shapes(model_config) -> bool:
    """Micro-batches differ in width, so pipeline stages send each other their shapes; not with
    virtual pipeline stages, whose micro-batches all have one shape (`models.transformer_config`)."""
    return model_config.virtual_pipeline_model_parallel_size is None


def build_optimizer(model: ModelChunks, config: Config):
    """Megatron's optimizer for the DDP-wrapped chunks of ``model`` (see the module docstring)."""
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    optimizer_config = OptimizerConfig(
        optimizer="adam",
        lr=config.lr,
        min_lr=config.min_lr,
        weight_decay=config.weight_decay,
        adam_beta1=config.adam_beta1,
        adam_beta2=config.adam_beta2,
        adam_eps=config.adam_eps,
        clip_grad=config.clip_grad,
        bf16=config.bf16,
        params_dtype=torch.bfloat16 if config.bf16 else torch.float32,
        use_distributed_optimizer=config.use_distributed_optimizer,
    )
    return get_megatron_optimizer(optimizer_config, list(model), config_overrides={})


def torch_optimizers(optimizer) -> list[torch.optim.Optimizer]:
    """The torch optimizers inside megatron's optimizer (one per chained part), which hold the state."""
    return [part.optimizer for part in getattr(optimizer, "chained_optimizers", [optimizer])]


def set_lr(optimizer, lr: float) -> None:
    """The learning rate of every parameter group for the next step."""
    for group in optimizer.param_groups:
        group["lr"] = lr
