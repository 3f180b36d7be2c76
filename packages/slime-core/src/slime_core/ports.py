"""Finding a free TCP port on the loopback interface (process-group rendezvous, engine servers)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (it may be taken again before it is used)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
