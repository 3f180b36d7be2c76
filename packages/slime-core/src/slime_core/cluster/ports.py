"""Finding a free TCP port (process-group rendezvous, engine servers, the router): on the
loopback by default, on a node's address for a run that spans nodes (`slime_core.cluster.network`).

A port found free may be taken by another process before its user binds it (a server binds
its port only once its model is loaded). Two things keep that rare and visible:

- `free_port` picks below the kernel's ephemeral range (``net.ipv4.ip_local_port_range``),
  where no other process's outgoing connection or ``bind(0)`` lands: only a process that asks
  for that very port can take it;
- the servers a run starts (engines, sglang-router, the middleware front) are started again on
  a fresh port when they exit because theirs was taken (`port_taken_in` reads that from their
  log).

A run's train ranks need no pick: the driver serves their rendezvous store on a port bound
as it is picked (`slime_core.rank.process_group.serve_store`). ``spawn_ranks`` (tests, ``slime
convert``) and the weight-broadcast group still pick one for their rank 0 to bind at once.
"""

from __future__ import annotations

import random
import re
import socket
from pathlib import Path

from slime_core.cluster.network import LOOPBACK

#: The lowest port `free_port` picks (below it: well-known and registered services).
LOWEST_PICKED = 20000
#: What a server's log says when its port was taken (the OS's EADDRINUSE message, SGLang's check).
PORT_TAKEN = re.compile(rb"address already in use|EADDRINUSE|port \d+ is (already )?in use", re.IGNORECASE)


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nobody listens on right now, below the ephemeral range where there is room
    (see the module docstring); it may still be taken again before it is used."""
    below = _ephemeral_low()
    for _ in range(64):
        port = random.randint(LOWEST_PICKED, below - 1) if below > LOWEST_PICKED + 1 else 0
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return sock.getsockname()[1]
    with socket.socket() as sock:  # every try taken: let the kernel pick
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux; 32768, its default, elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_taken_in(log_path: Path, tail_bytes: int = 16384) -> bool:
    """Whether the end of a server's log says that its port was in use."""
    try:
        with open(log_path, "rb") as log:
            log.seek(max(0, log.seek(0, 2) - tail_bytes))
            return PORT_TAKEN.search(log.read()) is not None
    except OSError:
        return False
