"""slime.utils.async_utils: ``run(coro)`` from synchronous code, on one background event loop
shared by the process (as slime's rollout functions use it)."""

from __future__ import annotations

import asyncio
import functools
import threading

__all__ = ["AsyncLoopThread", "get_async_loop", "run"]


class AsyncLoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="slime-async-utils", daemon=True).start()

    def run(self, coro):
        """Run ``coro`` on the loop and wait for its result (or its exception)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


@functools.lru_cache(maxsize=1)
def get_async_loop() -> AsyncLoopThread:
    """The process's background loop, started on first use."""
    return AsyncLoopThread()


def run(coro):
    """Run a coroutine on the background loop and return its result."""
    return get_async_loop().run(coro)
