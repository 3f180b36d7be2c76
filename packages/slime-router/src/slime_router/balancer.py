"""The sglang-router process (the Rust load balancer from PyPI) and its command line.

slime's defaults, which ``--router-*`` options override (``config.router_args``, keyed without the
prefix, e.g. ``--router-policy round_robin`` or ``router: {policy: round_robin}`` in YAML):

- ``host`` and ``prometheus_host`` 127.0.0.1, on free ports: nothing is reachable from other
  machines unless the user says so (``--router-host 0.0.0.0``); on a run that spans Ray
  nodes, the driver node's IP;
- the run's token (in the environment, `slime_router.rust_router`) as an admin key of the
  control plane (adding and removing engines), and across nodes as ``api_key`` too (sent to
  the engines, and required from every caller but ``/health``), see ``slime_core.cluster.network``;
- ``policy manual``: requests with the same ``X-SMG-Routing-Key`` go to the same engine
  (session affinity), requests without one are spread at random;
- ``health_check_interval_secs 10`` (sglang-router's 60 s would keep a dead engine listed for minutes);
- ``log_level error``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from slime_core.cluster import ports
from slime_core.cluster.child_process import die_with_parent
from slime_core.cluster.command_flags import as_flags
from slime_core.cluster.network import LOOPBACK, Network
from slime_router.servers import Server, connect_host

DEFAULTS: dict[str, Any] = {
    "host": LOOPBACK,
    "prometheus_host": LOOPBACK,
    "policy": "manual",
    "health_check_interval_secs": 10,
    "log_level": "error",
}
HINT = "check the --router-* options (python -m sglang_router.launch_router --help lists them)"


def router_options(
    passthrough: dict[str, Any], worker_urls: list[str], network: Network | None = None
) -> dict[str, Any]:
    """slime's defaults (for the run's ``network``), free ports, the engines, then the user's
    ``--router-*`` options."""
    options = {**DEFAULTS, **spanning_defaults(network or Network()), **passthrough}
    options.setdefault("port", ports.free_port(options["host"]))
    options.setdefault("prometheus_port", ports.free_port(options["prometheus_host"]))
    options["worker_urls"] = [*worker_urls, *_as_list(passthrough.get("worker_urls"))]
    return options


def spanning_defaults(network: Network) -> dict[str, Any]:
    """The address of a run that spans nodes (nothing on one node)."""
    if not network.spans_nodes:
        return {}
    host = network.listen_host()
    return {"host": host, "prometheus_host": host}


def router_host(passthrough: dict[str, Any], network: Network) -> str:
    """Where the router (and the middleware front beside it) listens."""
    return str(passthrough.get("host", spanning_defaults(network).get("host", DEFAULTS["host"])))


def command(options: dict[str, Any]) -> list[str]:
    """sglang-router's launcher command with ``options`` as flags (`as_flags`): ours
    (`slime_router.rust_router`: the same flags and Rust router, 0.5 CPU-s less to start)."""
    return [sys.executable, "-m", "slime_router.rust_router", *as_flags(options)]


def start(options: dict[str, Any], log_path: Path, key_env: dict[str, str] | None = None) -> Server:
    """Start sglang-router with ``options``, its output going to ``log_path``; ``key_env``: the
    run's keys (`slime_core.cluster.network.Network.key_env`), handed over in its environment."""
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command(options),
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
            env={**os.environ, **(key_env or {})},
        )
    return Server(f"http://{connect_host(options['host'])}:{options['port']}", "sglang-router", HINT, process, log_path)


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
