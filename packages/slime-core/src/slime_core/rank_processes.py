"""Running one function as a group of ranks in fresh processes (multi-rank tests, ``slime
convert``): ``spawn_ranks(target, world_size, *args)`` calls ``target(rank, world_size,
port, *args)`` on every rank and returns their results in rank order. ``port`` is a free
TCP port on 127.0.0.1 for the ranks' process group, which the target joins itself (gloo,
or Megatron's groups in ``slime_megatron.processes``).

The processes are spawned, never forked: a fork copies the caller's threads' locks but not
the threads (Ray's, gloo's, OpenMP's), and a forked rank can hang or crash in its first
collective when the caller runs Ray. A function the child cannot import by name (one defined
in a test module) is given as ``(path of its file, function name)`` and loaded from that
file in the child. Each rank uses one torch thread on a CPU machine (they share the cores).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable

from slime_core.ports import free_port

Target = Callable | tuple[str, str]


def spawn_ranks(target: Target, world_size: int, *args) -> list[Any]:
    """Each rank's return value, in rank order (a single rank runs in this process)."""
    port = free_port()
    if world_size == 1:
        return [resolve(target)(0, 1, port, *args)]
    import torch.multiprocessing as mp

    with mp.get_context("spawn").Manager() as manager:
        results = manager.dict()
        mp.start_processes(_rank_main, args=(target, world_size, port, args, results), nprocs=world_size,
                           join=True, start_method="spawn")
        return [results[rank] for rank in range(world_size)]


def resolve(target: Target) -> Callable:
    """The function ``target`` names: itself, or ``(file, name)`` loaded from that file."""
    if callable(target):
        return target
    path, name = target
    spec = importlib.util.spec_from_file_location(f"_slime_ranks_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def _rank_main(rank: int, target: Target, world_size: int, port: int, args, results) -> None:
    import torch

    if not torch.cuda.is_available():
        torch.set_num_threads(1)
    results[rank] = resolve(target)(rank, world_size, port, *args)
