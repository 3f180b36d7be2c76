"""`RunFault`: a part of a run failed in a way its message explains in full, and `stop_run`,
which stops the run with one from any thread.

Raised for faults under a run rather than mistakes in its config: the Ray cluster lost
(`slime_core.cluster.ray_watch`), a train rank dead, an engine that fails every request or hangs
(`slime_core.loop.fault_tolerance`). The message names the part (the cluster's address, the
rank, the engine's address and log) and what it said; ``slime run`` prints it without a
traceback, exits 1, and the run directory says ``failed``.

A watcher thread that finds such a fault calls `stop_run`: the driver's main thread, which
may be waiting on a rollout that will never finish or on a ``ray.get``, is interrupted by a
signal (`INTERRUPT`) and unwinds as on Ctrl-C, stopping every part; the driver then raises
the fault (`stopping_fault`) instead of reporting an interruption.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from slime_core.faults.run_error import RunError

#: The signal that interrupts the driver's main thread (Ray's driver leaves it alone).
INTERRUPT = signal.SIGUSR1

_fault: RunFault | None = None  # the fault that stops the run, once one does
_main_thread_stoppable = False
_lock = threading.Lock()


class RunFault(RunError):
    """A part of the run failed; the message names it and says what to do."""


def stop_run(fault: RunFault) -> None:
    """From any thread: stop the run with ``fault`` (the first fault wins). Outside `stoppable`
    (a part used on its own) nothing is interrupted; the fault is only recorded."""
    global _fault
    with _lock:
        if _fault is not None:
            return
        _fault = fault
        if _main_thread_stoppable:
            signal.pthread_kill(threading.main_thread().ident, INTERRUPT)


def stopping_fault() -> RunFault | None:
    """The fault `stop_run` was given, if any, since `stoppable` was entered."""
    return _fault


@contextmanager
def stoppable() -> Iterator[None]:
    """Let `stop_run` interrupt the main thread while inside (only where this runs on it)."""
    global _fault, _main_thread_stoppable
    _fault = None
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(INTERRUPT, _interrupt)
    _main_thread_stoppable = True
    try:
        yield
    finally:
        with _lock:  # no signal on its way once the handler is gone
            _main_thread_stoppable = False
            signal.signal(INTERRUPT, previous)


def _interrupt(signum, frame) -> None:
    """Unwind as Ctrl-C does: Ray's ``ray.get`` lets only KeyboardInterrupt through."""
    raise KeyboardInterrupt
