"""The entry point of a vLLM server that slime starts; it runs in vLLM's interpreter (``--vllm-python``).

``python -m slime_vllm.serve ARGS`` runs ``vllm.entrypoints.openai.api_server ARGS`` after four
changes that a run needs:

- the run's token (in the environment, never on the command line, which every local user can
  read) becomes vLLM's API key, and it guards every route but ``/health``, ``/ping``,
  ``/version`` and ``/metrics``: vLLM's own key guards only ``/v1``, ``/v2``, ``/inference``
  and ``/cohere``, which leaves ``/pause``, ``/collective_rpc`` (any worker method), ``/sleep``
  and the weight routes open to anyone who can reach the port. As SGLang takes slime's two keys
  (``slime_core.cluster.network``): on a run on one node the token is the admin key
  (``SLIME_ADMIN_API_KEY``) and SGLang's ``/generate`` stays open, as the routers' fronts keep it
  (slime-router's ``sessions`` middleware sends its own ``/generate`` without a key); across
  nodes it is the API key too (``SLIME_API_KEY``) and guards ``/generate`` as well;
- ``VLLM_SERVER_DEV_MODE=1``: the RL routes (``/pause``, ``/collective_rpc``, ...) exist only then;
- SGLang's ``/generate`` (`slime_vllm.sglang_route`), added where vLLM attaches its token-in,
  token-out route: slime's client and the routers in front of the engines speak it;
- vLLM's engine-core process is reniced (`ENGINE_CORE_NICENESS`) once it appears: on a
  machine with few cores its busy-waiting loop starves the API server, whose control calls
  (an abort, ``/metrics``) then take seconds and land after the requests they meant to stop.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time

#: Routes answered without the token: liveness and read-only facts.
OPEN_ROUTES = ("/health", "/ping", "/version", "/metrics")
#: Routes answered without the token on a run on one node, where it is the admin key only:
#: generation as routers send it (SGLang's ``--admin-api-key`` leaves generation open too).
GENERATION_ROUTES = ("/generate",)
#: How much nicer than the API server vLLM's engine core runs (see the module docstring).
ENGINE_CORE_NICENESS = 10
ENGINE_CORE_TITLE = b"VLLM::EngineCore"


def open_routes(api_key: str | None) -> tuple[str, ...]:
    """The routes answered without the token: `OPEN_ROUTES`, and `GENERATION_ROUTES` unless the
    run's token is its API key (a run across nodes) too."""
    return OPEN_ROUTES if api_key else OPEN_ROUTES + GENERATION_ROUTES


def guard_every_route(open_paths: tuple[str, ...]) -> None:
    """Make vLLM's API-key middleware check every route but ``open_paths``."""
    from vllm.entrypoints.serve.middleware import authenticate

    middleware = authenticate.AuthenticationMiddleware

    def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or scope.get("method") == "OPTIONS":
            return self.app(scope, receive, send)
        path = scope["path"].removeprefix(scope.get("root_path", ""))
        if path not in open_paths and not self.verify_token(authenticate.Headers(scope=scope)):
            return authenticate.JSONResponse(content={"error": "Unauthorized"}, status_code=401)(scope, receive, send)
        return self.app(scope, receive, send)

    middleware.__call__ = __call__


def renice_engine_core(timeout_s: float = 600.0) -> None:
    """Renice this server's engine-core process once it runs (a daemon thread's loop)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid in _descendants(os.getpid()):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    if cmdline.read().startswith(ENGINE_CORE_TITLE):
                        os.setpriority(os.PRIO_PROCESS, pid, ENGINE_CORE_NICENESS)
                        return
            except OSError:
                continue  # gone meanwhile
        time.sleep(0.5)


def _descendants(root: int) -> list[int]:
    """The processes below ``root`` (from /proc: their parent ids)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def add_sglang_route() -> None:
    """Attach `slime_vllm.sglang_route` wherever vLLM attaches ``/inference/v1/generate``."""
    from vllm.entrypoints.scale_out.token_in_token_out import api_router

    from slime_vllm import sglang_route

    attach_vllm_routes = api_router.attach_router

    def attach_router(app):
        attach_vllm_routes(app)
        sglang_route.attach(app)

    api_router.attach_router = attach_router


def main() -> None:
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"
    api_key = os.environ.get("SLIME_API_KEY")
    token = api_key or os.environ.get("SLIME_ADMIN_API_KEY")
    if token:
        os.environ["VLLM_API_KEY"] = token
        guard_every_route(open_routes(api_key))
    add_sglang_route()
    threading.Thread(target=renice_engine_core, daemon=True).start()
    sys.argv = ["vllm.entrypoints.openai.api_server", *sys.argv[1:]]
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
