"""How the parts of a run reach each other: over the loopback on one node, over each node's
own address across Ray nodes; and the run's token, which guards their control endpoints.

A run spans nodes when the bundles of its placement group sit on more than one Ray node
(`slime_core.cluster.placement.Placement`). Then:

- the train ranks (and the critic's) rendezvous at a store the driver serves on its node's IP
  (`slime_core.rank.process_group.serve_store`);
- engine servers and the router listen on the IP of the node they run on
  (``ray.util.get_node_ip_address()`` in their process), and the driver's weight-broadcast
  group on the driver's.

Every run gets a token, made here (`Network.for_nodes`), which the servers it starts take the
way SGLang takes its two keys:

- as the *admin* key, on every run: the control endpoints (pause and continue generation,
  weight updates by every transport, abort, flush cache, release and resume memory; the
  router's worker list; the middleware front's own routes) answer 401 to a call without
  ``Authorization: Bearer TOKEN``, so no other local user can pause the engines or load
  other weights into them;
- as the *API* key as well, when the run spans nodes: then every route but ``/health`` wants
  it (generation included), since the ports can be reached from other machines.

The token reaches a server through its environment (`Network.key_env`: ``SLIME_ADMIN_API_KEY``,
``SLIME_API_KEY``), which the server takes out of its own environment as it starts
(`take_keys`), never through a command line (which every local user can read in
``/proc/PID/cmdline``, ``ps``) and never through a file of the run directory. Every client
slime ships sends it (`Network.auth_header`); a user's function finds it in
``config.network.token``.
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass

#: The address of everything on a run that stays on one node.
LOOPBACK = "127.0.0.1"
#: The environment variables that hand a server the run's keys (`Network.key_env`, `take_keys`).
ADMIN_KEY_ENV = "SLIME_ADMIN_API_KEY"
API_KEY_ENV = "SLIME_API_KEY"


@dataclass(frozen=True)
class Network:
    """A run's network facts, which travel with its `Config` (``config.network``) to every process."""

    spans_nodes: bool = False
    token: str | None = None  # the run's token (see the module docstring); None outside a run

    @classmethod
    def for_nodes(cls, node_count: int) -> Network:
        """A fresh token; the loopback for one node, node addresses for more."""
        return cls(node_count > 1, secrets.token_hex(24))

    def key_env(self) -> dict[str, str]:
        """The environment variables that give a server started for this run its keys: the
        admin key always, the API key too across nodes (nothing without a token)."""
        if not self.token:
            return {}
        return {ADMIN_KEY_ENV: self.token, **({API_KEY_ENV: self.token} if self.spans_nodes else {})}

    def auth_header(self) -> dict[str, str]:
        """The header that a call to one of the run's servers carries (none without a token)."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

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


def take_keys() -> tuple[str | None, str | None]:
    """``(api_key, admin_key)`` that `Network.key_env` handed this server process, taken out of
    its environment so that nothing it starts inherits them (None for a key not given)."""
    return os.environ.pop(API_KEY_ENV, None) or None, os.environ.pop(ADMIN_KEY_ENV, None) or None


def bearer_matches(authorization: str | None, key: str) -> bool:
    """Whether an ``Authorization`` header carries ``Bearer key`` (compared in constant time)."""
    scheme, _, given = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), key.encode())


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
