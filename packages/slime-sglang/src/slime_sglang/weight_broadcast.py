"""Weight updates by collective broadcast: SGLang's ``update_weights_from_distributed`` path.

The sender (the trainer's rank 0, or any process holding the weights) and every engine join
a process group of their own, apart from any default group the sender's process already
has: the sender is rank 0, engine ``i`` starts at rank ``1 + i × ranks_per_engine``. Per
bucket, the sender posts the tensors' names, dtypes and shapes to every engine
(``/update_weights_from_distributed``) and broadcasts the tensors in that order; each engine
receives them into new tensors of the announced dtypes and shapes and loads them like a
tensor-bucket update, with the version the post names.

Both sides build the group with :func:`open_group`, so their rendezvous cannot drift
apart. Its layout is SGLang's (a TCP store at ``master_address:master_port``, held by rank
0, its keys prefixed by the group name), so the same sender feeds real SGLang servers over
NCCL and CPU engines over gloo. A sender must broadcast exactly the tensors it announced:
gloo aborts a receiving process that gets a tensor of another size.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from slime_core.cluster.network import LOOPBACK, Network
from slime_core.cluster.ports import free_port

NamedTensors = list[tuple[str, torch.Tensor]]


def open_group(
    master_address: str, master_port: int, rank: int, world_size: int, group_name: str, backend: str, timeout_s: float
) -> dist.ProcessGroup:
    """Join (rank 0: host) the process group ``group_name``; blocks until every rank joined.

    Every collective on the group, and the rendezvous itself, fails after ``timeout_s``.
    """
    from torch.distributed.distributed_c10d import Backend, PrefixStore, _new_process_group_helper, _world

    timeout = timedelta(seconds=timeout_s)
    store, rank, world_size = next(
        dist.rendezvous(f"tcp://{master_address}:{master_port}", rank, world_size, timeout=timeout)
    )
    store.set_timeout(timeout)
    # torch renamed the helper's options argument (pg_options -> backend_options) in 2.6.
    options = (
        "backend_options"
        if "backend_options" in inspect.signature(_new_process_group_helper).parameters
        else "pg_options"
    )
    made = _new_process_group_helper(
        world_size,
        rank,
        [],
        Backend(backend),
        PrefixStore(group_name, store),
        group_name=group_name,
        timeout=timeout,
        **{options: None},
    )
    group = made[0] if isinstance(made, tuple) else made
    _world.pg_group_ranks[group] = {i: i for i in range(world_size)}  # group rank = "global" rank
    return group


def collective_backend() -> str:
    """nccl with CUDA (SGLang servers on GPUs), else gloo (CPU engines)."""
    return "nccl" if torch.cuda.is_available() else "gloo"


def close_group(group: dist.ProcessGroup) -> None:
    dist.destroy_process_group(group)


def describe(tensors: NamedTensors) -> tuple[list[str], list[str], list[list[int]]]:
    """The names, dtypes (``"bfloat16"``: SGLang's spelling) and shapes a post announces."""
    return (
        [name for name, _ in tensors],
        [str(t.dtype).removeprefix("torch.") for _, t in tensors],
        [list(t.shape) for _, t in tensors],
    )


def parse_dtype(name: str) -> torch.dtype:
    """The torch dtype named ``name`` (``"float32"`` or ``"torch.float32"``); ValueError if none."""
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}; use torch's names, e.g. 'float32' or 'bfloat16'")
    return dtype


def send(group: dist.ProcessGroup, tensors: list[torch.Tensor]) -> None:
    """Broadcast ``tensors`` from rank 0, one collective each, in order."""
    for tensor in tensors:
        dist.broadcast(tensor, src=0, group=group)


def receive(
    group: dist.ProcessGroup, names: list[str], dtypes: list[torch.dtype], shapes: list[list[int]]
) -> NamedTensors:
    """Receive the announced tensors from rank 0, in order, into new CPU tensors."""
    received = []
    for name, dtype, shape in zip(names, dtypes, shapes):
        tensor = torch.empty(shape, dtype=dtype)
        dist.broadcast(tensor, src=0, group=group)
        received.append((name, tensor))
    return received


def in_daemon_thread(fn: Callable[..., Any], *args: Any) -> asyncio.Future:
    """``fn(*args)`` on a daemon thread, as a future of the running loop.

    Not the loop's executor: a collective stuck until its timeout must not hold up
    ``asyncio.run``'s exit or a server's shutdown, which wait for executor threads.
    """
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def run() -> None:
        try:
            result, failed = fn(*args), False
        except BaseException as exc:  # handed to the awaiting coroutine
            result, failed = exc, True
        try:
            loop.call_soon_threadsafe(_settle, future, result, failed)
        except RuntimeError:  # the loop is closed: nobody waits for the outcome any more
            pass

    future.add_done_callback(_retrieve)  # an error nobody awaits any more is not logged as lost
    threading.Thread(target=run, name=f"slime-{fn.__name__}", daemon=True).start()
    return future


def _retrieve(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


def _settle(future: asyncio.Future, result: Any, failed: bool) -> None:
    if future.done():
        return
    if failed:
        future.set_exception(result)
    else:
        future.set_result(result)


class WeightBroadcaster:
    """Rank 0 of a weight-update group spanning a set of engines: one bucket at a time to all.

    ``await WeightBroadcaster.connect(urls)`` creates the group, ``broadcast(bucket,
    version)`` pushes one bucket of ``(hf_name, tensor)`` pairs, ``close()`` leaves it::

        broadcaster = await WeightBroadcaster.connect(engine_urls, backend="gloo")
        for bucket in buckets:
            await broadcaster.broadcast(bucket, version="3")
        await broadcaster.close()

    ``backend``: ``"gloo"`` (tensors sent from CPU; the CPU engine) or ``"nccl"`` (from the
    current CUDA device; SGLang servers on GPUs). A CPU engine is one rank of the group; a
    SGLang server with tensor parallelism takes one rank per GPU, so give
    ``ranks_per_engine`` = its ``--tp-size`` there. ``master_address`` must be an address of
    this machine that the engines reach (127.0.0.1 when they run here); ``api_key`` the
    engines' control key (the run's token).

    A failed broadcast leaves the engines' receiving side in an unknown state: the
    broadcaster then refuses further buckets; close it and connect a new one.
    """

    def __init__(self, engines, group: dist.ProcessGroup, group_name: str, backend: str):
        self.engines = engines  # slime_sglang.engine_group.EngineGroup of the receiving engines
        self.group_name = group_name
        self.device = torch.device("cpu") if backend == "gloo" else torch.device("cuda", torch.cuda.current_device())
        self._group = group
        self._sending: asyncio.Future | None = None
        self._out_of_step: str | None = None  # why the last broadcast failed
        self._closed = False

    @classmethod
    async def connect(
        cls,
        engine_urls: list[str],
        backend: str = "gloo",
        *,
        master_address: str = LOOPBACK,
        ranks_per_engine: int = 1,
        group_name: str | None = None,
        timeout_s: float = 120.0,
        api_key: str | None = None,
    ) -> WeightBroadcaster:
        """Create the group with every engine in ``engine_urls``; raises `EngineError` when an
        engine refuses, or the join's error when the group does not form within ``timeout_s``."""
        from slime_sglang.engine_group import EngineGroup

        engines = EngineGroup(list(engine_urls), request_timeout=timeout_s + 10, network=Network(token=api_key))
        group_name = group_name or f"slime-weights-{uuid.uuid4().hex[:8]}"
        port = free_port(master_address)
        world_size = 1 + len(engines.urls) * ranks_per_engine
        joining = in_daemon_thread(open_group, master_address, port, 0, world_size, group_name, backend, timeout_s)
        inviting = asyncio.ensure_future(
            engines.init_weights_update_group(master_address, port, group_name, backend, ranks_per_engine)
        )
        try:
            await _first_failure(inviting, joining)  # an engine's refusal need not wait for the join to time out
        except BaseException:
            inviting.cancel()
            raise
        return cls(engines, joining.result(), group_name, backend)

    async def broadcast(self, bucket: NamedTensors, version: str) -> None:
        """Load ``bucket`` into every engine, as weight version ``version``."""
        if self._closed or self._out_of_step:
            raise RuntimeError(
                f"weight-update group {self.group_name} is "
                f"{'closed' if self._closed else 'out of step: ' + self._out_of_step}; "
                "connect a new WeightBroadcaster"
            )
        tensors = [(name, tensor.detach().to(self.device).contiguous()) for name, tensor in bucket]
        names, dtypes, shapes = describe(tensors)
        posting = asyncio.ensure_future(
            self.engines.update_weights_from_distributed(names, dtypes, shapes, self.group_name, version)
        )
        self._sending = in_daemon_thread(send, self._group, [tensor for _, tensor in tensors])
        try:
            await _first_failure(posting, self._sending)
        except BaseException as exc:
            posting.cancel()
            self._out_of_step = f"a broadcast failed ({type(exc).__name__}: {exc})"
            raise

    async def close(self) -> None:
        """Every engine destroys its side of the group, then this process does (idempotent).

        A broadcast still stuck on a missing receiver keeps the local group until its
        timeout; it is not destroyed under it.
        """
        if self._closed:
            return
        self._closed = True
        try:
            await self.engines.destroy_weights_update_group(self.group_name)
        finally:
            if self._sending is None or self._sending.done():
                close_group(self._group)

    async def __aenter__(self) -> WeightBroadcaster:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()


async def _first_failure(*futures: asyncio.Future) -> None:
    """Wait until every future is done, or until one fails: then raise its error."""
    done, _ = await asyncio.wait(futures, return_when=asyncio.FIRST_EXCEPTION)
    for future in done:
        if future.exception() is not None:
            raise future.exception()
