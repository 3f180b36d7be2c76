"""The engine's control endpoints (SGLang's names): abort, pause / continue, cache flush,
weight updates and memory release. Each takes the engine and the JSON body and returns the
JSON answer; a dict with ``"success": False`` is sent with HTTP 400.

Whatever touches the scheduler's state or the weights runs at a safe point between two
generation steps. A weight update is decoded / read from disk (or received by broadcast:
:mod:`weight_groups`) first, off the scheduler thread, then checked and copied in one safe
point, so generation never sees half of it.
The copy is atomic per call: a trainer sending several calls (one per bucket) should pause
generation around them, as slime does with real SGLang servers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from slime_sglang.cpu_engine import adapters
from slime_sglang.cpu_engine.engine import Engine
from slime_sglang.cpu_engine.request import BadRequest
from slime_sglang.cpu_engine.weights import (
    apply_update,
    check_update,
    read_checkpoint,
    release_weights,
    resume_weights,
    updatable,
)
from slime_sglang.tensor_payload import decode_bucket

MEMORY_TAGS = ("weights", "kv_cache", "cuda_graph")
PAUSE_MODES = ("in_place", "retract", "abort")


async def abort_request(engine: Engine, body: dict) -> dict:
    """``{"rid": str}`` or ``{"abort_all": true}``: those requests answer now with what they
    have, finish reason abort. An unknown rid is not an error (it may just have finished)."""
    abort_all = body.get("abort_all", False)
    rid = body.get("rid")
    if abort_all is not True and not isinstance(rid, str):
        raise BadRequest('give {"rid": "<request id>"} or {"abort_all": true}')
    target = None if abort_all else rid
    count = await engine.at_safe_point(lambda: engine.scheduler.abort(target, "aborted by /abort_request"))
    return {"success": True, "aborted": count}


async def pause_generation(engine: Engine, body: dict) -> dict:
    """Stop decoding after the current step; requests keep their place (mode ``in_place`` or
    ``retract``: the same here) or are aborted first (mode ``abort``, the default, as in SGLang)."""
    mode = body.get("mode") or "abort"
    if mode not in PAUSE_MODES:
        raise BadRequest(f"mode must be one of {', '.join(PAUSE_MODES)}, got {mode!r}")

    def pause():
        if mode == "abort":
            engine.scheduler.abort(None, "aborted by /pause_generation")
        engine.scheduler.paused = True

    await engine.at_safe_point(pause)
    return {"success": True, "message": "generation paused"}


async def continue_generation(engine: Engine, body: dict) -> dict:
    await engine.at_safe_point(lambda: setattr(engine.scheduler, "paused", False))
    return {"success": True, "message": "generation continued"}


async def flush_cache(engine: Engine, body: dict) -> dict:
    """Nothing to flush: the CPU engine keeps no prefix cache (a request's cache leaves with it)."""
    return {"success": True, "message": "no prefix cache to flush"}


async def update_weights_from_tensor(engine: Engine, body: dict) -> dict:
    """``serialized_named_tensors``: one ``tensor_payload.encode_bucket`` string per bucket (or,
    from the raw body form, the bucket's bytes)."""
    payloads = body.get("serialized_named_tensors")
    if not isinstance(payloads, list) or not all(isinstance(p, (str, bytes)) for p in payloads):
        raise BadRequest(
            "serialized_named_tensors must be a list of strings from slime_sglang.tensor_payload.encode_bucket"
        )
    return await load_update(engine, body, lambda: asyncio.to_thread(_decode_all, payloads), complete=False)


async def update_weights_from_disk(engine: Engine, body: dict) -> dict:
    """``model_path``: a Hugging Face directory of the same architecture (safetensors), or a peft
    LoRA adapter directory for it (`adapters`)."""
    model_path = body.get("model_path")
    if not isinstance(model_path, str):
        raise BadRequest("model_path (a Hugging Face directory with safetensors weights) is missing")
    return await load_update(engine, body, lambda: asyncio.to_thread(read_checkpoint, model_path), complete=True)


def _decode_all(payloads: list[str]) -> list:
    return [pair for payload in payloads for pair in decode_bucket(payload)]


def check_update_fields(body: dict) -> None:
    """``BadRequest`` if the fields every update shares (version, load format) are wrong."""
    version = body.get("weight_version")
    if version is not None and not isinstance(version, str):
        raise BadRequest(f"weight_version must be a string or null, got {version!r}")
    if body.get("load_format") is not None:
        raise BadRequest(f"load_format {body['load_format']!r} is not supported by the CPU engine; leave it out")


async def load_update(engine: Engine, body: dict, read: Callable[[], Awaitable[list]], complete: bool) -> dict:
    """Get the ``(name, tensor)`` pairs off the event loop (``await read()``), then check and
    copy them at a safe point, with the body's ``weight_version``. ``complete``: a whole
    checkpoint, which must cover every parameter (unless it is a LoRA adapter: `adapters`)."""
    check_update_fields(body)
    version = body.get("weight_version")
    try:
        named = await read()
    except Exception as exc:  # a malformed bucket; a missing, unreadable or corrupt checkpoint; a failed receive
        return {"success": False, "message": f"cannot read the weights: {exc}"}

    def apply() -> dict:
        if "weights" in engine.released:
            return {"success": False, "message": "the weights are released; POST /resume_memory_occupation first"}
        plain, adapter = adapters.split(named)
        parameters = updatable(engine.model)
        problem = check_update(engine.model, plain, complete and not adapter) or adapters.problem(parameters, adapter)
        if problem:
            return {"success": False, "message": f"update refused, nothing changed: {problem}"}
        if body.get("abort_all_requests"):
            engine.scheduler.abort(None, "aborted for a weight update")
        apply_update(engine.model, plain)
        for name, _ in plain:  # the sender now owns these weights whole
            engine.lora_base.pop(name, None)
        adapters.merge(parameters, adapter, engine.lora_base)
        if version is not None:
            engine.scheduler.weight_version = version
        return {
            "success": True,
            "message": f"updated {len(named)} tensors; weight_version {engine.scheduler.weight_version}",
        }

    return await engine.at_safe_point(apply)


async def release_memory_occupation(engine: Engine, body: dict) -> dict:
    """Free the weights (tag ``weights``; written to a temporary file) and hold generation
    until every released tag is resumed. ``kv_cache`` and ``cuda_graph`` free nothing on CPU."""
    tags = _tags(body)

    def release():
        if "weights" in tags and "weights" not in engine.released:
            engine.released_weights = release_weights(engine.model)
        engine.released |= tags
        engine.scheduler.held.add("released memory")

    await engine.at_safe_point(release)
    return {"success": True, "message": f"released {sorted(tags)}"}


async def resume_memory_occupation(engine: Engine, body: dict) -> dict:
    tags = _tags(body)

    def resume():
        if "weights" in tags and engine.released_weights is not None:
            resume_weights(engine.model, engine.released_weights)
            engine.released_weights = None
        engine.released -= tags
        if not engine.released:
            engine.scheduler.held.discard("released memory")

    await engine.at_safe_point(resume)
    return {"success": True, "message": f"resumed {sorted(tags)}"}


def _tags(body: dict) -> set[str]:
    tags = body.get("tags")
    if tags is None:
        return set(MEMORY_TAGS)
    if not isinstance(tags, list) or not all(tag in MEMORY_TAGS for tag in tags):
        raise BadRequest(f"tags must be a list drawn from {', '.join(MEMORY_TAGS)} (or left out for all), got {tags!r}")
    return set(tags)
