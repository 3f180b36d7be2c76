"""The CPU engine's HTTP server: SGLang's native API on aiohttp.

Routes (SGLang's paths): ``/generate`` (every field of SGLang's ``GenerateReqInput``, see
:mod:`generate_body`; with ``stream`` the answers come as server-sent events, each once it is
complete, then ``data: [DONE]``); the control endpoints of :mod:`control` and
:mod:`weight_groups`; and
``/health``, ``/health_generate``, ``/server_info`` (``/get_server_info``), ``/model_info``
(``/get_model_info``). Every error answers JSON ``{"error": "..."}``: 400 for a bad request
(the message says how to fix it), 404 / 405 for a wrong path or method, 500 for a failure
inside the engine. The event loop only parses and answers; the model runs on the scheduler
thread, so health checks stay fast while the engine generates.

Keys, as SGLang's: with an admin key (``--admin-api-key``) the control endpoints
(`GUARDED_PATHS`: everything that changes the engine's state) answer 401 to a request without
``Authorization: Bearer KEY``; with an API key (``--api-key``) every route but ``/health*``
does (generation too). A run hands its token in as the admin key, and as the API key too
when it spans nodes (``slime_core.cluster.network``).
"""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import web

from slime_core.cluster.network import bearer_matches
from slime_sglang.cpu_engine import control, pull_weights, weight_groups
from slime_sglang.cpu_engine.engine import Engine
from slime_sglang.cpu_engine.generate_body import split_generate_body
from slime_sglang.cpu_engine.request import BadRequest, parse_generate, parse_generate_copies, refuse_unknown

log = logging.getLogger(__name__)
ENGINE = web.AppKey("engine", Engine)
HEALTH_GENERATE_TIMEOUT_S = 20.0
MAX_BODY_BYTES = 1 << 36  # weight buckets can be large; the sender is trusted (bind to localhost)

#: body fields of /update_weights_from_tensor (the raw form carries all but the first in its query)
TENSOR_UPDATE_KEYS = ("serialized_named_tensors", "weight_version", "flush_cache", "abort_all_requests", "load_format")
#: control endpoint -> (handler, accepted body keys)
CONTROL_ROUTES = {
    "/abort_request": (control.abort_request, ("rid", "abort_all")),
    "/pause_generation": (control.pause_generation, ("mode",)),
    "/continue_generation": (control.continue_generation, ()),
    "/flush_cache": (control.flush_cache, ()),
    "/update_weights_from_disk": (
        control.update_weights_from_disk,
        ("model_path", "weight_version", "abort_all_requests", "load_format"),
    ),
    "/init_weights_update_group": (
        weight_groups.init_weights_update_group,
        ("master_address", "master_port", "rank_offset", "world_size", "group_name", "backend"),
    ),
    "/update_weights_from_distributed": (
        weight_groups.update_weights_from_distributed,
        (
            "names",
            "dtypes",
            "shapes",
            "group_name",
            "weight_version",
            "flush_cache",
            "abort_all_requests",
            "load_format",
        ),
    ),
    "/destroy_weights_update_group": (weight_groups.destroy_weights_update_group, ("group_name",)),
    "/pull_weights": (pull_weights.pull_weights, ("source_dir", "local_checkpoint_dir", "target_version")),
    "/release_memory_occupation": (control.release_memory_occupation, ("tags",)),
    "/resume_memory_occupation": (control.resume_memory_occupation, ("tags",)),
}


def create_app(engine: Engine, api_key: str | None = None, admin_api_key: str | None = None) -> web.Application:
    """The app serving ``engine``; ``api_key`` guards every route but ``/health*``,
    ``admin_api_key`` the control endpoints (see the module docstring)."""
    logging.getLogger("aiohttp.server").addFilter(RouterProbeFilter())
    middlewares = [_errors_as_json] + ([_key_required(api_key, admin_api_key)] if api_key or admin_api_key else [])
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    app[ENGINE] = engine
    app.router.add_post("/generate", generate)
    for path, (handler, keys) in CONTROL_ROUTES.items():
        app.router.add_post(path, _control_route(handler, keys))
    app.router.add_post("/update_weights_from_tensor", update_weights_from_tensor)
    app.router.add_get("/flush_cache", _control_route(control.flush_cache, ()))
    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health_generate)
    for path in ("/server_info", "/get_server_info"):
        app.router.add_get(path, server_info)
    for path in ("/model_info", "/get_model_info"):
        app.router.add_get(path, model_info)
    return app


async def generate(request: web.Request) -> web.StreamResponse:
    """One answer, or a list for a batch of prompts or a body with ``sampling_params.n`` > 1
    (n answers per prompt, prompt-major), as SGLang."""
    engine = request.app[ENGINE]
    body = await _json_body(request)
    items, batched = split_generate_body(body, engine.tokenize)
    copies = [copy for item in items for copy in _with_media(engine, item)]
    if body.get("stream"):
        return await _stream(request, engine, copies)
    if len(copies) == 1 and not batched:  # one prompt, n = 1: one answer, not a list, as SGLang
        return web.json_response(await engine.generate(copies[0]))
    return web.json_response(await _all_or_none(engine.generate(copy) for copy in copies))


def _copies(engine: Engine, item: dict) -> list:
    return parse_generate_copies(item, engine.vocab_size, engine.context_length)


def _with_media(engine: Engine, item: dict) -> list:
    """One prompt's requests, holding its images and videos."""
    image_data, video_data = item.pop("image_data"), item.pop("video_data")
    return engine.with_images(image_data, _copies(engine, item), video_data)


async def _stream(request: web.Request, engine: Engine, copies: list) -> web.StreamResponse:
    """SGLang's streamed answer: one server-sent event per answer (with its ``index`` when there
    are several) as each completes, then ``data: [DONE]``."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)

    async def indexed(index: int, copy) -> tuple[int, dict]:
        return index, await engine.generate(copy)

    tasks = [asyncio.ensure_future(indexed(i, copy)) for i, copy in enumerate(copies)]
    try:
        for next_done in asyncio.as_completed(tasks):
            index, result = await next_done
            chunk = {**result, "index": index} if len(copies) > 1 else result
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    except BadRequest as exc:
        await response.write(f"data: {json.dumps({'error': str(exc)})}\n\n".encode())
    finally:
        for task in tasks:
            task.cancel()
    await response.write(b"data: [DONE]\n\n")
    return response


async def _all_or_none(calls) -> list:
    """The results of ``calls`` run together; if one fails, the others are cancelled (which
    aborts their generation) and its error is raised."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()


async def health(request: web.Request) -> web.Response:
    """200 once the scheduler thread has come round between two steps to answer (a no-op
    call): an engine whose scheduler is stuck in a step does not answer, which a health check's
    timeout (``--rollout-health-check-timeout``) counts as hung. 503, with the reason, if that
    thread died or its last generation step failed, and none succeeded since (an engine that
    answers every request with an error, e.g. on non-finite weights, is not healthy; bad
    requests are refused before they reach a step)."""
    scheduler = request.app[ENGINE].scheduler
    if not scheduler.alive:
        return web.json_response({"error": "the scheduler thread stopped; see this engine's log"}, status=503)
    await request.app[ENGINE].at_safe_point(lambda: None)
    if scheduler.failed_steps:
        return web.json_response(
            {
                "error": f"its last {scheduler.failed_steps} generation step(s) failed, the last "
                f"with {scheduler.last_error}"
            },
            status=503,
        )
    return web.json_response({"status": "ok"})


async def health_generate(request: web.Request) -> web.Response:
    """200 once the engine generated one token; 503 when it cannot (paused, released, stuck)."""
    engine = request.app[ENGINE]
    if engine.scheduler.paused or engine.scheduler.held:
        return web.json_response(
            {
                "error": "generation is paused or memory is released; "
                "POST /continue_generation or /resume_memory_occupation"
            },
            status=503,
        )
    probe = parse_generate(
        {"input_ids": [0], "sampling_params": {"max_new_tokens": 1, "temperature": 0}},
        engine.vocab_size,
        engine.context_length,
    )
    try:
        await asyncio.wait_for(engine.generate(probe), HEALTH_GENERATE_TIMEOUT_S)
    except asyncio.TimeoutError:
        return web.json_response({"error": f"no token generated within {HEALTH_GENERATE_TIMEOUT_S:.0f} s"}, status=503)
    return web.json_response({"status": "ok"})


async def server_info(request: web.Request) -> web.Response:
    return web.json_response(request.app[ENGINE].server_info())


async def model_info(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    return web.json_response(
        {"model_path": engine.model_path, "tokenizer_path": engine.model_path, "is_generation": True}
    )


class RouterProbeFilter(logging.Filter):
    """Drops aiohttp's error log of sglang-router's gRPC probe: the router first opens each
    worker with an HTTP/2 preface ("PRI * HTTP/2.0"), then falls back to HTTP/1.1."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (error is not None and "PRI/Upgrade" in str(error))


async def update_weights_from_tensor(request: web.Request) -> web.Response:
    """SGLang's JSON body, or one bucket's safetensors bytes as the body with the other fields
    in the query (``application/octet-stream``, as `EngineClient` sends it: no base64)."""
    if request.headers.get("Content-Type") != "application/octet-stream":  # aiohttp assumes octet-stream without one
        return await _control_route(control.update_weights_from_tensor, TENSOR_UPDATE_KEYS)(request)
    fields = {key: _query_value(key, value) for key, value in request.query.items()}
    refuse_unknown(fields, TENSOR_UPDATE_KEYS[1:], f"query field for {request.path}")
    result = await control.update_weights_from_tensor(
        request.app[ENGINE], {**fields, "serialized_named_tensors": [await request.read()]}
    )
    return web.json_response(result, status=400 if result.get("success") is False else 200)


def _query_value(key: str, value: str):
    """A query field as its JSON body would carry it: booleans for the flags, else the text."""
    if key not in ("flush_cache", "abort_all_requests"):
        return value
    if value not in ("true", "false"):
        raise BadRequest(f"{key} must be true or false, got {value!r}")
    return value == "true"


def _control_route(handler, keys: tuple[str, ...]):
    async def route(request: web.Request) -> web.Response:
        body = await _json_body(request)
        refuse_unknown(body, keys, f"field for {request.path}")
        result = await handler(request.app[ENGINE], body)
        return web.json_response(result, status=400 if result.get("success") is False else 200)

    return route


async def _json_body(request: web.Request) -> dict:
    """The request's JSON object ({} for an empty body), whatever its content type."""
    text = await request.text()
    if not text.strip():
        return {}
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"the body is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(body, dict):
        raise BadRequest(f"the body must be a JSON object, got {type(body).__name__}")
    return body


#: the paths that change the engine's state, which an API key guards
GUARDED_PATHS = frozenset([*CONTROL_ROUTES, "/update_weights_from_tensor"])


def _key_required(api_key: str | None, admin_api_key: str | None):
    """A middleware that answers 401 to a call without the key its path wants (as SGLang: a
    control endpoint wants the admin key if there is one, else the API key; any other path but
    ``/health*`` the API key)."""

    @web.middleware
    async def key_required(request: web.Request, handler):
        if request.path.startswith("/health"):
            return await handler(request)
        key, flag = (
            (admin_api_key, "--admin-api-key")
            if request.path in GUARDED_PATHS and admin_api_key
            else (api_key, "--api-key")
        )
        if key and not bearer_matches(request.headers.get("Authorization"), key):
            return web.json_response(
                {
                    "error": f"{request.path} needs this engine's key: send 'Authorization: Bearer "
                    f"KEY' with the key given to {flag} (slime's clients send the run's token "
                    "themselves; a user's function finds it in config.network.token)"
                },
                status=401,
            )
        return await handler(request)

    return key_required


@web.middleware
async def _errors_as_json(request: web.Request, handler):
    try:
        return await handler(request)
    except BadRequest as exc:
        return web.json_response({"error": str(exc)}, status=400)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return web.json_response({"error": f"{exc.reason}: {request.method} {request.path}"}, status=exc.status)
    except Exception as exc:
        log.exception("%s %s failed", request.method, request.path)
        return web.json_response({"error": f"the engine failed: {type(exc).__name__}: {exc}"}, status=500)
