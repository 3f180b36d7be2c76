"""slime.agent.aiohttp_threaded: serving an aiohttp app from a background thread, with an access
log that records only what needs a look."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

from aiohttp import web
from aiohttp.web_log import AccessLogger

__all__ = ["AppHandle", "FilteredAccessLogger", "run_app_in_thread"]


class FilteredAccessLogger(AccessLogger):
    """Logs a request only when it failed (not 200) or took over `SLOW_THRESHOLD_SEC`; never HEADs."""

    SLOW_THRESHOLD_SEC = 120.0

    def log(self, request, response, time):
        if request.method != "HEAD" and (response.status != 200 or time > self.SLOW_THRESHOLD_SEC):
            super().log(request, response, time)


@dataclass
class AppHandle:
    """A running app: where it listens, its thread and event loop; ``stop()`` shuts it down."""

    host: str
    port: int
    thread: threading.Thread
    loop: asyncio.AbstractEventLoop
    runner: web.AppRunner

    def stop(self) -> None:
        done = asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop)
        done.result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


def run_app_in_thread(
    app: web.Application,
    *,
    host: str = "0.0.0.0",
    port: int = 0,
    thread_name: str = "aiohttp-app",
    start_timeout_sec: float = 15.0,
    runner_kwargs: dict | None = None,
) -> AppHandle:
    """Serve ``app`` on its own event loop in a daemon thread; returns once it listens (port 0:
    a free port, read from the handle). ``runner_kwargs`` go to ``web.AppRunner``."""
    ready = threading.Event()
    state: dict = {}

    def serve() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            runner = web.AppRunner(app, **(runner_kwargs or {}))
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, host, port)
            loop.run_until_complete(site.start())
            state.update(loop=loop, runner=runner, port=runner.addresses[0][1])
        except BaseException as exc:
            state["error"] = exc
            return
        finally:
            ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, name=thread_name, daemon=True)
    thread.start()
    if not ready.wait(start_timeout_sec):
        raise TimeoutError(f"{thread_name} did not start listening on {host}:{port} within {start_timeout_sec} s")
    if "error" in state:
        raise state["error"]
    return AppHandle(host=host, port=state["port"], thread=thread, loop=state["loop"], runner=state["runner"])
