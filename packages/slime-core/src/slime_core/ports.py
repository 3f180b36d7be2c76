"""Finding a free TCP port (process-group rendezvous, engine servers): on the loopback by
default, on a node's address for a run that spans nodes (`slime_core.network`)."""

from __future__ import annotations

import socket

from slime_core.network import LOOPBACK


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nobody listens on right now (it may be taken again before it is used)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
