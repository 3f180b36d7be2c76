"""Run a function under a hard time limit, from any thread.

sympy can take unbounded time on adversarial answers, and a reward function must return.
Each call runs in a pool of worker processes (``python -c`` running `serve`), one call at a
time each. The call is sent as (module, function name, arguments); a worker that misses the
deadline is killed and replaced, so the limit is hard even for a C call that never returns
to the interpreter (which a ``SIGALRM`` in the calling thread cannot interrupt: an earlier
version used one in the main thread, and a test run hung on it). Worker start-up (importing
sympy, a few seconds) is not counted against the limit; workers are reused.

Raises `TimeoutError`.
"""

from __future__ import annotations

import atexit
import importlib
import os
import pickle
import select
import struct
import subprocess
import sys
import threading

_HEADER = struct.Struct("!I")
_STARTUP_SECONDS = 120.0


def call_with_time_limit(fn, args: tuple, seconds: float, preload: tuple[str, ...] = ()):
    """``fn(*args)``, or `TimeoutError` after `seconds`.

    `fn` must be a module-level function (the worker imports it by name) and `args`
    picklable. `preload` names modules a new worker imports before its first call.
    """
    return _POOL.call(fn, args, seconds, preload)


class _Worker:
    """One worker process and its pipes."""

    def __init__(self, preload: tuple[str, ...]):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        code = "from slime_rewards.math.time_limit import serve; serve()"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code, *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            bufsize=0,  # unbuffered, so select() on the pipe sees every pending byte
        )
        status, _ = self._receive(_STARTUP_SECONDS)
        if status != "ready":
            self.kill()
            raise RuntimeError("math time-limit worker failed to start; check that slime_rewards imports")

    def call(self, fn, args: tuple, seconds: float):
        _write_frame(self.process.stdin, (fn.__module__, fn.__qualname__, args))
        status, value = self._receive(seconds)
        if status == "error":
            raise value if isinstance(value, BaseException) else RuntimeError(value)
        return value

    def _receive(self, seconds: float):
        ready, _, _ = select.select([self.process.stdout], [], [], seconds)
        if not ready:
            raise TimeoutError(f"worker call took longer than {seconds:g} s")
        frame = _read_frame(self.process.stdout)
        if frame is None:
            raise RuntimeError("math time-limit worker exited unexpectedly")
        return frame

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            pipe.close()


class _WorkerPool:
    """Idle workers, reused; at most `size` calls run at once, others wait their turn."""

    def __init__(self, size: int):
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(size)

    def call(self, fn, args: tuple, seconds: float, preload: tuple[str, ...]):
        with self._slots:
            worker = self._take(preload)
            try:
                result = worker.call(fn, args, seconds)
            except BaseException:
                worker.kill()  # timed out or broken: never reuse it
                raise
            with self._lock:
                self._idle.append(worker)
            return result

    def _take(self, preload: tuple[str, ...]) -> _Worker:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _Worker(preload)

    def close(self) -> None:
        with self._lock:
            workers, self._idle = self._idle, []
        for worker in workers:
            worker.kill()


_POOL = _WorkerPool(size=max(2, os.cpu_count() or 2))
atexit.register(_POOL.close)


def serve() -> None:
    """Worker main loop: read (module, name, args) frames from stdin, answer on stdout."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints from the called code must not corrupt the protocol
    for module in sys.argv[1:]:
        importlib.import_module(module)
    _write_frame(out, ("ready", None))
    while True:
        frame = _read_frame(sys.stdin.buffer)
        if frame is None:
            return
        module, name, args = frame
        try:
            reply = ("ok", getattr(importlib.import_module(module), name)(*args))
        except Exception as error:  # reported to the caller, which re-raises it
            reply = ("error", error if _picklable(error) else repr(error))
        _write_frame(out, reply)


def _picklable(value) -> bool:
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


def _write_frame(stream, value) -> None:
    data = pickle.dumps(value)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read_frame(stream):
    header = _read_exactly(stream, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    body = _read_exactly(stream, size)
    return None if body is None else pickle.loads(body)


def _read_exactly(stream, size: int) -> bytes | None:
    """`size` bytes, or None at end of stream (raw pipes may return short reads)."""
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data
