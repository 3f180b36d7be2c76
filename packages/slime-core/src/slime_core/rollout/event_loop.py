"""`EventLoopThread`: the rollout's asyncio event loop, in a background thread of the driver.

Every rollout, evaluation and engine control call runs on this one loop: the generation
client's connections belong to it, and a rollout of asynchronous mode keeps generating there
while the driver trains. The driver's code stays synchronous: `run` waits for a coroutine's
result, `submit` hands back a future.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class EventLoopThread:
    """An asyncio loop running for ever in a daemon thread, until `close`."""

    def __init__(self, name: str = "slime-rollout"):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and wait for its result (or its error)."""
        return self.submit(coroutine).result()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coroutine`` on the loop; its result arrives through the future."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def close(self) -> None:
        """Stop the loop and wait (10 s at most) for its thread."""
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
