"""Weight updates by broadcast on the CPU engine: SGLang's three endpoints, over gloo.

- ``/init_weights_update_group`` (``master_address``, ``master_port``, ``rank_offset``,
  ``world_size``, ``group_name``, ``backend``): join the sender's group as rank
  ``rank_offset`` (a CPU engine is one rank); answers once the whole group has formed.
- ``/update_weights_from_distributed`` (``names``, ``dtypes``, ``shapes``, ``group_name``,
  ``weight_version``, ``flush_cache``, ``abort_all_requests``, ``load_format``): receive
  the announced tensors from rank 0, in order, and load them like a tensor-bucket update
  (checked in full, applied at one safe point; the version shows in every answer after).
- ``/destroy_weights_update_group`` (``group_name``): leave the group.

Joining and receiving wait on the network, so they run on threads of their own: the HTTP
loop keeps answering and the scheduler keeps generating meanwhile. A group receives one
update at a time. Names and shapes are checked after the tensors arrived, so a refused
update still drains the broadcast and the group stays usable; a receive that failed (a
timeout, a sender that went away) leaves the group out of step, and later updates on it
are refused until it is destroyed and joined again. See ``slime_sglang.weight_broadcast``.
"""

from __future__ import annotations

import threading

import torch

from slime_sglang.cpu_engine.control import check_update_fields, load_update
from slime_sglang.cpu_engine.engine import Engine
from slime_sglang.cpu_engine.request import BadRequest
from slime_sglang.weight_broadcast import close_group, in_daemon_thread, open_group, parse_dtype, receive

DEFAULT_GROUP = "weight_update_group"  # SGLang's default group_name
GROUP_TIMEOUT_S = 300.0  # joining, and each tensor of a receive, fail after this long


class WeightGroup:
    """A joined group: its process group, the lock of its receives, and whether it broke."""

    def __init__(self, process_group):
        self.process_group = process_group
        self.lock = threading.Lock()
        self.broken: str | None = None  # why the group is out of step with its sender

    def receive(self, names: list[str], dtypes: list[torch.dtype], shapes: list[list[int]]) -> list:
        with self.lock:
            if self.broken:
                raise RuntimeError(f"the group is out of step since {self.broken}; destroy it and init a new one")
            try:
                return receive(self.process_group, names, dtypes, shapes)
            except Exception as exc:
                self.broken = f"a receive failed ({type(exc).__name__}: {exc})"
                raise RuntimeError(f"{self.broken}; destroy the group and init a new one") from exc

    def close(self) -> None:
        with self.lock:  # after a receive in flight
            close_group(self.process_group)


async def init_weights_update_group(engine: Engine, body: dict) -> dict:
    address, port, rank, world_size, name = _join_fields(body)
    if name in engine.weight_groups:
        return {
            "success": False,
            "message": f"weight-update group {name!r} exists already on this engine; "
            "POST /destroy_weights_update_group first, or pick another group_name",
        }
    engine.weight_groups[name] = None  # joining: the name is taken

    def join() -> None:  # records the outcome itself: the caller may disconnect while it waits
        try:
            engine.weight_groups[name] = WeightGroup(
                open_group(address, port, rank, world_size, name, "gloo", GROUP_TIMEOUT_S)
            )
        except BaseException:
            engine.weight_groups.pop(name, None)
            raise

    try:
        await in_daemon_thread(join)
    except Exception as exc:
        return {
            "success": False,
            "message": f"cannot join weight-update group {name!r} at {address}:{port} as rank "
            f"{rank} of {world_size}: {exc}",
        }
    return {"success": True, "message": f"joined weight-update group {name!r} as rank {rank} of {world_size}"}


async def update_weights_from_distributed(engine: Engine, body: dict) -> dict:
    group = _joined(engine, body.get("group_name", DEFAULT_GROUP))
    try:
        names, dtypes, shapes = _tensor_fields(body)
        check_update_fields(body)
    except BadRequest as exc:  # the sender will broadcast tensors this engine cannot receive
        group.broken = f"an update it could not read ({exc})"
        raise
    return await load_update(
        engine, body, lambda: in_daemon_thread(group.receive, names, dtypes, shapes), complete=False
    )


async def destroy_weights_update_group(engine: Engine, body: dict) -> dict:
    name = body.get("group_name", DEFAULT_GROUP)
    group = _joined(engine, name)
    del engine.weight_groups[name]
    in_daemon_thread(group.close)  # once a receive in flight is over; nothing to wait for here
    return {"success": True, "message": f"left weight-update group {name!r}"}


def _joined(engine: Engine, name) -> WeightGroup:
    group = engine.weight_groups.get(name)
    if group is None:
        state = "is still joining" if name in engine.weight_groups else "does not exist"
        joined = sorted(n for n, g in engine.weight_groups.items() if g is not None)
        raise BadRequest(
            f"weight-update group {name!r} {state} on this engine (joined: {joined}); "
            "POST /init_weights_update_group first and wait for its answer"
        )
    return group


def _join_fields(body: dict) -> tuple[str, int, int, int, str]:
    address, port = body.get("master_address"), body.get("master_port")
    rank, world_size = body.get("rank_offset"), body.get("world_size")
    name, backend = body.get("group_name", DEFAULT_GROUP), body.get("backend", "nccl")  # SGLang's defaults
    if not isinstance(address, str) or not address:
        raise BadRequest("master_address (the sender's host) is missing")
    if not _is_int(port) or not 0 < port < 65536:
        raise BadRequest(f"master_port must be a TCP port, got {port!r}")
    if not _is_int(world_size) or not _is_int(rank) or not 0 < rank < world_size:
        raise BadRequest(
            f"rank_offset must be in 1..world_size-1 (rank 0 is the sender), got {rank!r} of {world_size!r}"
        )
    if not isinstance(name, str) or not name:
        raise BadRequest("group_name must be a non-empty string")
    if backend != "gloo":
        raise BadRequest(
            f"the CPU engine receives weights over gloo; create the group with backend 'gloo' (got {backend!r})"
        )
    return address, port, rank, world_size, name


def _tensor_fields(body: dict) -> tuple[list[str], list[torch.dtype], list[list[int]]]:
    names, dtypes, shapes = body.get("names"), body.get("dtypes"), body.get("shapes")
    if not (
        isinstance(names, list)
        and isinstance(dtypes, list)
        and isinstance(shapes, list)
        and len(names) == len(dtypes) == len(shapes)
    ):
        raise BadRequest("names, dtypes and shapes must be lists of the same length (one entry per tensor)")
    if not all(isinstance(name, str) for name in names):
        raise BadRequest("names must be strings (Hugging Face parameter names)")
    if not all(isinstance(shape, list) and all(_is_int(d) and d >= 0 for d in shape) for shape in shapes):
        raise BadRequest("each shape must be a list of non-negative integers")
    try:
        return names, [parse_dtype(dtype) for dtype in dtypes], shapes
    except (TypeError, AttributeError, ValueError) as exc:
        raise BadRequest(f"dtypes: {exc}") from None


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
