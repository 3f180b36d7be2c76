"""Noticing that the Ray cluster under a run is gone, and stopping the run in bounded time.

When Ray's GCS dies (its process killed, its node lost), every Ray call of the driver waits:
an actor call never answers, ``remove_placement_group`` blocks for minutes, and after 60 s
Ray's core worker ends the process itself, leaving ``status: running`` in the run directory.

`watching` runs a thread in the driver that connects to the GCS's port every `POLL_S`; when
no connection succeeds for `LOST_AFTER_S`, it stops the run with `RayClusterLost`
(`slime_core.faults.run_fault.stop_run`). The parts are then stopped without waiting on Ray (`lost`
tells them; their processes die with their raylet anyway), ``status.json`` says ``failed``
and the message names the cluster.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from slime_core.faults.run_fault import RunFault, stop_run, stopping_fault

#: Seconds between two connections to the GCS.
POLL_S = 1.0
#: Seconds without a connection to the GCS after which the cluster counts as lost: a GCS that
#: restarts (Ray's GCS fault tolerance) is back well within this; Ray's own clients give up at 60.
#: ``$SLIME_RAY_LOST_AFTER_S`` sets another (a GCS that takes longer to restart; the tests' short wait).
LOST_AFTER_S = float(os.environ.get("SLIME_RAY_LOST_AFTER_S", "10"))


class RayClusterLost(RunFault):
    """The Ray cluster of the run (its GCS) stopped answering; the run stopped."""


def lost() -> bool:
    """Whether the run's Ray cluster counts as lost: parts that stop through Ray skip their
    Ray calls then, which would wait for minutes."""
    return isinstance(stopping_fault(), RayClusterLost)


@contextmanager
def watching(gcs_address: str) -> Iterator[None]:
    """Watch the GCS at ``gcs_address`` (``host:port``) while inside (see the module docstring)."""
    stop = threading.Event()
    thread = threading.Thread(target=_watch, args=(gcs_address, stop), name="slime-ray-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=POLL_S + 1)


def _watch(gcs_address: str, stop: threading.Event) -> None:
    host, _, port = gcs_address.rpartition(":")
    last_answer = time.monotonic()
    while not stop.wait(POLL_S):
        if _answers(host, int(port)):
            last_answer = time.monotonic()
        elif time.monotonic() - last_answer >= LOST_AFTER_S:
            stop_run(
                RayClusterLost(
                    f"lost the Ray cluster: its GCS at {gcs_address} has not accepted a connection for "
                    f"{LOST_AFTER_S:.0f} s; the run stopped (its checkpoints and run directory are kept). Check the "
                    "Ray "
                    "head node (`ray status`), then resume with --load"
                )
            )
            return


def _answers(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=POLL_S).close()
    except OSError:
        return False
    return True


def bounded(fn: Callable[[], object], seconds: float) -> bool:
    """Run ``fn()`` in a daemon thread and wait for it at most ``seconds``; whether it finished.
    For Ray calls on the way out that would block for minutes when the cluster is gone (their
    error, if it finished with one, is raised here)."""
    failure: list[BaseException] = []

    def call():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - raised in the caller below
            failure.append(exc)

    thread = threading.Thread(target=call, name="slime-bounded-stop", daemon=True)
    thread.start()
    thread.join(seconds)
    if failure:
        raise failure[0]
    return not thread.is_alive()
