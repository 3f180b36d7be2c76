"""Running one function as a group of Megatron ranks in fresh processes (``slime convert``,
tests): ``run_on_ranks(fn, world_size, sizes, *args)`` calls ``fn(rank, sizes, *args)`` on
each rank, joined by gloo (nccl for CUDA tensors), with Megatron's parallel groups for
``sizes`` (an object with the Megatron options, see ``slime_megatron.parallel``).

The processes are spawned, never forked: a fork copies the caller's threads' locks but not
the threads (Ray's, gloo's, OpenMP's), and a forked rank can hang in its first collective.
A function the child cannot import by name (one defined in a test module) is given as
``(path of its file, function name)`` and loaded from that file in the child.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable

from slime_core.ports import free_port

Target = Callable | tuple[str, str]


def run_on_ranks(target: Target, world_size: int, sizes, *args) -> list[Any]:
    """Each rank's return value, in rank order (one rank runs in this process)."""
    port = free_port()
    if world_size == 1:
        return [_run_rank(0, target, world_size, port, sizes, args)]
    import torch.multiprocessing as mp

    with mp.get_context("spawn").Manager() as manager:
        results = manager.dict()
        mp.start_processes(_rank_main, args=(target, world_size, port, sizes, args, results), nprocs=world_size,
                           join=True, start_method="spawn")
        return [results[rank] for rank in range(world_size)]


def _rank_main(rank: int, target: Target, world_size: int, port: int, sizes, args, results) -> None:
    import torch

    if not torch.cuda.is_available():
        torch.set_num_threads(1)  # the ranks share the cores
    results[rank] = _run_rank(rank, target, world_size, port, sizes, args)


def _run_rank(rank: int, target: Target, world_size: int, port: int, sizes, args) -> Any:
    from slime_megatron.parallel import destroy_parallel, init_parallel

    fn = _resolve(target)
    init_parallel(sizes, rank, world_size, "127.0.0.1", port)
    try:
        return fn(rank, sizes, *args)
    finally:
        destroy_parallel()


def _resolve(target: Target) -> Callable:
    if callable(target):
        return target
    path, name = target
    spec = importlib.util.spec_from_file_location(f"_slime_ranks_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)
