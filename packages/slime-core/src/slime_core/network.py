"""How the parts of a run reach each other: over the loopback on one node, over each node's
own address across Ray nodes.

A run spans nodes when the bundles of its placement group sit on more than one Ray node
(`slime_core.placement.Placement`). Then:

- the train ranks (and the critic's) rendezvous at the IP of their rank 0's node;
- engine servers and the router listen on the IP of the node they run on
  (``ray.util.get_node_ip_address()`` in their process), and the driver's weight-broadcast
  group on the driver's;
- the engines' control endpoints (weight updates, pause, abort, release memory) and the
  router's admin endpoints take only requests that carry the run's token
  (``Authorization: Bearer TOKEN``), made here, fresh for each run.

A run on one node keeps everything on ``127.0.0.1`` and needs no token: no port of it can be
reached from another machine.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

#: The address of everything on a run that stays on one node.
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Network:
    """A run's network facts, which travel with its `Config` (``config.network``) to every process."""

    spans_nodes: bool = False
    token: str | None = None  # the control endpoints' token; None on one node

    @classmethod
    def for_nodes(cls, node_count: int) -> Network:
        """Loopback for one node; node addresses and a fresh token for more."""
        return cls(True, secrets.token_hex(24)) if node_count > 1 else cls()

    def listen_host(self) -> str:
        """The address a server started in this process listens on: this node's IP when the run
        spans nodes (needs Ray connected, as it is in any actor), else the loopback."""
        if not self.spans_nodes:
            return LOOPBACK
        import ray

        return ray.util.get_node_ip_address()

    def use_node_interface_for_gloo(self) -> None:
        """Make gloo groups of this process (and of the processes it starts) connect over the
        interface that holds this node's IP. gloo otherwise binds to the address its host name
        resolves to, often the loopback, and peers on other nodes are refused. Sets
        ``GLOO_SOCKET_IFNAME`` unless the user set it; nothing on one node."""
        if not self.spans_nodes or os.environ.get("GLOO_SOCKET_IFNAME"):
            return
        name = interface_of(self.listen_host())
        if name:
            os.environ["GLOO_SOCKET_IFNAME"] = name

    def actor_options(self, options: dict, gloo_interface: str | None) -> dict:
        """Ray actor ``options`` of a process that joins gloo groups across nodes (a train rank),
        with ``GLOO_SOCKET_IFNAME`` set to ``gloo_interface`` (`gloo_interface` of its node's IP,
        found on that node) when the run spans nodes and one was found. (Ray runs a
        ``worker_process_setup_hook`` only when given to ``ray.init``, not to one actor, so the
        variable travels in the options' runtime_env; `slime_core.train_backend.RankProcess`
        sets it in the rank's process.)"""
        if not self.spans_nodes or not gloo_interface:
            return options
        runtime_env = dict(options.get("runtime_env") or {})
        runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), "GLOO_SOCKET_IFNAME": gloo_interface}
        return {**options, "runtime_env": runtime_env}


def gloo_interface(ip: str) -> str | None:
    """The interface gloo should use on this node, whose IP is ``ip``: ``GLOO_SOCKET_IFNAME`` if
    the node's processes have it (the user set it), else the interface that holds ``ip``."""
    return os.environ.get("GLOO_SOCKET_IFNAME") or interface_of(ip)


def interface_of(ip: str) -> str | None:
    """The name of the network interface that holds IPv4 address ``ip`` (Linux), or None."""
    import fcntl
    import socket
    import struct

    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(sock.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address on it
                continue
            if socket.inet_ntoa(answer[20:24]) == ip:
                return name
    return None
