"""Process groups for one Megatron training rank: torch.distributed, then Megatron's
tensor / pipeline / context / expert / data-parallel groups (and the replica's, see
:func:`replica_group`), then its RNG states."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from slime_core.rank.process_group import init_default_group


def init_parallel(config, rank: int, world_size: int, master_addr: str, master_port: int) -> None:
    """Join the ``world_size`` training ranks and build Megatron's parallel groups.

    On CUDA, CUDA tensors go over nccl and CPU tensors over gloo (``cpu:gloo,cuda:nccl``);
    without CUDA everything goes over gloo and :func:`slime_megatron.cpu_compat.enable_cpu_mode`
    makes megatron-core run on the CPU. The parallel sizes are the config's Megatron options
    (see ``slime_megatron.plugin``); the data-parallel size is what is left of ``world_size``.
    """
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
    else:
        from slime_megatron.cpu_compat import enable_cpu_mode

        enable_cpu_mode()
        # ranks share the cores (a caller that asked for fewer threads keeps its setting)
        torch.set_num_threads(min(torch.get_num_threads(), max(1, (os.cpu_count() or 1) // world_size)))
    backend = "cpu:gloo,cuda:nccl" if cuda else "gloo"
    timeout = getattr(config, "distributed_timeout_minutes", None)  # tools pass only the parallel sizes
    init_default_group(backend, master_addr, master_port, rank, world_size, timeout)
    initialize_model_parallel(config)
    seed_parallel_rng(config.seed)


def initialize_model_parallel(config) -> None:
    """Megatron's process groups for the sizes in ``config`` (torch.distributed must be up),
    with the virtual pipeline size of --num-layers-per-virtual-pipeline-stage."""
    from megatron.core import parallel_state

    from slime_megatron.checks import VIRTUAL_KEY, num_hidden_layers, virtual_pipeline_size

    virtual = virtual_pipeline_size(config, num_hidden_layers(config)) if getattr(config, VIRTUAL_KEY, None) else None
    timeout = getattr(config, "distributed_timeout_minutes", None)  # Megatron's groups: the same bound
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=config.tensor_model_parallel_size,
        pipeline_model_parallel_size=config.pipeline_model_parallel_size,
        context_parallel_size=config.context_parallel_size,
        expert_model_parallel_size=config.expert_model_parallel_size,
        expert_tensor_parallel_size=config.expert_tensor_parallel_size,
        virtual_pipeline_model_parallel_size=virtual,
        **({"distributed_timeout_minutes": timeout} if timeout else {}),
    )
    global _replica_group
    _replica_group = _new_replica_group() if config.context_parallel_size > 1 else None


_replica_group = None


def replica_group():
    """The ranks of this rank's model replica (one data-parallel rank: its tensor, pipeline
    and context-parallel ranks), which train on the same samples. Megatron has no such group
    with context parallelism (its model-parallel group is tensor × pipeline), so one is built then."""
    from megatron.core import parallel_state

    return _replica_group if _replica_group is not None else parallel_state.get_model_parallel_group()


def _new_replica_group():
    """One process group per data-parallel rank, of the ranks that have it (every rank creates all of them)."""
    from megatron.core import parallel_state

    ranks: list[int | None] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, parallel_state.get_data_parallel_rank())
    mine = None
    for dp_rank in sorted(set(ranks)):
        group = dist.new_group([rank for rank, r in enumerate(ranks) if r == dp_rank])
        mine = group if dp_rank == parallel_state.get_data_parallel_rank() else mine
    return mine


def seed_parallel_rng(seed: int) -> None:
    """Seed the default generators with ``seed`` and Megatron's tracked RNG states (one per
    tensor- and expert-parallel rank, so dropout differs across shards but not replicas)."""
    from megatron.core import tensor_parallel

    torch.manual_seed(seed)
    tensor_parallel.model_parallel_cuda_manual_seed(seed)


def destroy_parallel() -> None:
    """Tear down Megatron's groups and the default process group (tests, tools)."""
    from megatron.core import parallel_state

    global _replica_group
    parallel_state.destroy_model_parallel()
    _replica_group = None
    if dist.is_initialized():
        dist.destroy_process_group()
