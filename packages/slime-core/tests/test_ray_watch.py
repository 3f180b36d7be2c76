"""`slime_core.cluster.ray_watch`: a GCS that stops accepting connections stops the run (in its main
thread) with `RayClusterLost` naming the address; `bounded` gives up on a call that blocks."""

import socket
import threading
import time

import pytest

from slime_core.cluster import ray_watch
from slime_core.faults import run_fault
from slime_core.faults.run_fault import stoppable, stopping_fault


def test_a_gcs_that_stops_answering_stops_the_run_naming_it(monkeypatch):
    monkeypatch.setattr(run_fault, "_fault", None)  # and back afterwards: later tests' Ray calls are not skipped
    monkeypatch.setattr(ray_watch, "POLL_S", 0.05)
    monkeypatch.setattr(ray_watch, "LOST_AFTER_S", 0.3)
    gcs = socket.socket()
    gcs.bind(("127.0.0.1", 0))
    gcs.listen()
    address = f"127.0.0.1:{gcs.getsockname()[1]}"
    with stoppable(), ray_watch.watching(address):
        time.sleep(0.5)  # it answers: nothing happens
        assert stopping_fault() is None and not ray_watch.lost()
        gcs.close()
        with pytest.raises(KeyboardInterrupt):  # the main thread is interrupted wherever it waits
            threading.Event().wait(10)
    assert ray_watch.lost()
    assert str(stopping_fault()).startswith(
        f"lost the Ray cluster: its GCS at {address} has not accepted a connection for 0 s; the run stopped"
    )


def test_bounded_gives_up_on_a_blocked_call_and_passes_errors_on():
    blocked = threading.Event()
    assert ray_watch.bounded(lambda: None, 1.0)
    assert not ray_watch.bounded(blocked.wait, 0.1)
    blocked.set()
    with pytest.raises(ValueError, match="boom"):
        ray_watch.bounded(lambda: (_ for _ in ()).throw(ValueError("boom")), 1.0)
