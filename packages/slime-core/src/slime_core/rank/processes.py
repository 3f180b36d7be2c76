"""Running one function as a group of ranks in fresh processes (multi-rank tests, ``slime
convert``): ``spawn_ranks(target, world_size, *args)`` calls ``target(rank, world_size,
port, *args)`` on every rank and returns their results in rank order. ``port`` is a free
TCP port on the loopback for the ranks' process group (they all run on this machine), which the target joins itself
(gloo,
or Megatron's groups in ``slime_megatron.processes``).

The processes are spawned, never forked: a fork copies the caller's threads' locks but not
the threads (Ray's, gloo's, OpenMP's), and a forked rank can hang or crash in its first
collective when the caller runs Ray. A function the child cannot import by name (one defined
in a test module) is given as ``(path of its file, function name)`` and loaded from that
file in the child. Each rank uses one torch thread on a CPU machine (they share the cores).
`RankPool` runs the same calls on processes kept between calls (a test session's).
"""

from __future__ import annotations

import atexit
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slime_core.cluster.ports import free_port

Target = Callable | tuple[str, str]


def spawn_ranks(target: Target, world_size: int, *args) -> list[Any]:
    """Each rank's return value, in rank order (a single rank runs in this process)."""
    port = free_port()
    if world_size == 1:
        return [resolve(target)(0, 1, port, *args)]
    import torch.multiprocessing as mp

    with mp.get_context("spawn").Manager() as manager:
        results = manager.dict()
        mp.start_processes(
            _rank_main,
            args=(target, world_size, port, args, results),
            nprocs=world_size,
            join=True,
            start_method="spawn",
        )
        return [results[rank] for rank in range(world_size)]


class RankPool:
    """`spawn_ranks` on processes that stay up between calls (test sessions): spawning a rank
    costs seconds of imports (torch, megatron-core), the call itself often less. Each call
    joins a new process group on a new port; a rank's error, or a rank that dies, stops every
    process of that world size (the others may wait in a collective) and is raised here;
    the next call spawns them again. ``close()`` stops them all."""

    def __init__(self):
        self._ranks: dict[int, list] = {}  # world size -> [(process, connection)] in rank order
        atexit.register(self.close)  # before multiprocessing's exit handler joins them (they are not daemons)

    def run(self, target: Target, world_size: int, *args) -> list[Any]:
        """Each rank's return value, in rank order (a single rank runs in this process)."""
        if world_size == 1:
            return spawn_ranks(target, 1, *args)
        ranks = self._ranks.get(world_size) or self._spawn(world_size)
        port = free_port()
        for rank, (_, connection) in enumerate(ranks):
            connection.send((target, rank, world_size, port, args))
        try:
            return self._gather(ranks)
        except BaseException:
            self._stop(world_size)
            raise

    def close(self) -> None:
        for world_size in list(self._ranks):
            self._stop(world_size)

    def _spawn(self, world_size: int) -> list:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        ranks = []
        for _ in range(world_size):
            mine, theirs = context.Pipe()
            process = context.Process(target=_pooled_rank, args=(theirs,))  # not a daemon: a rank may start processes
            process.start()
            ranks.append((process, mine))
        self._ranks[world_size] = ranks
        return ranks

    @staticmethod
    def _gather(ranks: list) -> list[Any]:
        """Every rank's answer, in rank order; raises at the first error or death, whichever
        rank it comes from (the others may be waiting for that one)."""
        from multiprocessing.connection import wait

        answers: dict[int, Any] = {}
        while len(answers) < len(ranks):
            waiting = [rank for rank in range(len(ranks)) if rank not in answers]
            wait([ranks[rank][1] for rank in waiting] + [ranks[rank][0].sentinel for rank in waiting])
            for rank in waiting:
                process, connection = ranks[rank]
                if connection.poll():
                    try:
                        ok, value = connection.recv()
                    except EOFError:  # it exited: its end of the pipe closed
                        ok, value = False, None
                    if not ok:
                        process.join(timeout=1)
                        raise RuntimeError(
                            f"rank {rank} failed:\n{value}"
                            if value
                            else f"rank {rank} died (exit code {process.exitcode}) before it answered"
                        )
                    answers[rank] = value
                elif not process.is_alive():
                    raise RuntimeError(f"rank {rank} died (exit code {process.exitcode}) before it answered")
        return [answers[rank] for rank in range(len(ranks))]

    def _stop(self, world_size: int) -> None:
        for process, connection in self._ranks.pop(world_size, []):
            process.kill()
            process.join()
            connection.close()


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


def _pooled_rank(connection) -> None:
    """A `RankPool` process: runs ``target(rank, world_size, port, *args)`` for each task it is
    sent, and sends back ``(True, result)`` or ``(False, traceback)``."""
    import traceback

    import torch

    while True:
        try:
            target, rank, world_size, port, args = connection.recv()
        except EOFError:  # the pool's process is gone
            return
        if not torch.cuda.is_available():
            torch.set_num_threads(1)
        try:
            answer = (True, resolve(target)(rank, world_size, port, *args))
        except BaseException:
            answer = (False, traceback.format_exc())
        connection.send(answer)
