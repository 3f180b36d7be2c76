"""Starting the router for a run: sglang-router, and the middleware front when middlewares are on.

    router = start_router(config, ["http://127.0.0.1:30001", "http://127.0.0.1:30002"])
    EngineClient(router.url)              # what the rollout calls
    router.add_worker(url); router.remove_worker(url); router.workers()
    router.metrics()                      # the metrics middleware's summary, for the run's log
    router.stop()

With ``--sglang-router-ip/--sglang-router-port`` the run uses that sglang-router (and leaves
it running at the end) instead of starting one; the engines are added to it.

Both processes get the run's keys in their environment (``slime_core.cluster.network``); every call
made here carries the token. A process that exits because its port was taken between the
pick and its bind (``slime_core.cluster.ports``) is started again, with the other, on fresh ports,
up to `PORT_ATTEMPTS` times.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from slime_core.cluster import ports
from slime_core.cluster.child_process import die_with_parent
from slime_router import balancer
from slime_router.servers import RouterError, Server, connect_host, log_tail
from slime_router.workers import WorkerError, Workers

if TYPE_CHECKING:
    from slime_core.config import Config

#: How many times the router's processes are started when one lost its port (module docstring).
PORT_ATTEMPTS = 3
FRONT_HINT = (
    "see front.log: a middleware failed to start (sessions loads the tokenizer of --hf-checkpoint; "
    "a plugin's middleware may need its own options)"
)


class Router:
    """A running router: sglang-router, behind the middleware front when middlewares are on."""

    def __init__(self, url: str, router_url: str, log_dir: Path, servers: list[Server], network=None):
        self.url = url  # what clients call: the front when middlewares are on, else sglang-router
        self.router_url = router_url  # sglang-router itself
        self.log_dir = log_dir  # sglang-router.log and front.log of the processes started here
        self.processes = [server.process for server in servers if server.process]  # started here; front first
        self._servers = servers
        self._headers = network.auth_header() if network else {}
        self._workers = Workers(router_url, api_key=network.token if network else None)

    def add_worker(self, url: str) -> None:
        """Route requests to the engine at ``url`` too (returns once sglang-router lists it)."""
        self._workers.add(url)

    def remove_worker(self, url: str) -> None:
        """Stop routing to the engine at ``url`` (no-op if it is not listed)."""
        self._workers.remove(url)

    def workers(self) -> list[str]:
        """URLs of the engines sglang-router routes to."""
        return self._workers.urls()

    def metrics(self, reset: bool = True) -> dict[str, float]:
        """The ``metrics`` middleware's summary since the last reset (``{}`` when it is not on)."""
        if self.url == self.router_url:
            return {}
        answer = httpx.get(
            f"{self.url}/metrics/summary",
            params={"reset": int(reset)},
            headers=self._headers,
            timeout=10.0,
            trust_env=False,
        )
        return answer.json() if answer.status_code == 200 and "json" in answer.headers.get("content-type", "") else {}

    def stop(self) -> None:
        """Stop the front and the sglang-router started here (safe to call twice)."""
        for server in self._servers:
            server.stop()

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_router(config: Config, worker_urls: list[str], plugins=None) -> Router:
    """Start (or connect to) sglang-router for ``worker_urls``, and the middleware front if
    ``config.router_middleware`` names any; return once both answer and list the engines.

    ``plugins``: the run's loaded `Plugins` (default: the installed ones), where the
    middlewares are looked up; local ``-p`` plugin modules are handed to the front.
    """
    from slime_core.plugins import Plugins

    plugins = plugins or Plugins()
    names = list(config.get("router_middleware") or [])
    if names:
        from slime_router.chain import check_names

        check_names(names, plugins)  # unknown names fail here, with a suggestion, before anything starts
    log_dir = Path(config.get("output_dir") or tempfile.mkdtemp(prefix="slime-router-")) / "router"
    log_dir.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, PORT_ATTEMPTS + 1):
        started: list[Server] = []
        try:
            _start(config, worker_urls, plugins, names, log_dir, started)
            break
        except RouterError:
            for server in reversed(started):
                server.stop()
            if attempt == PORT_ATTEMPTS or not any(_lost_port(server) for server in started):
                raise
            print(
                f"slime-router: a port was taken before {' or '.join(s.what for s in started if _lost_port(s))} "
                "could bind it; starting again on fresh ports",
                file=sys.stderr,
                flush=True,
            )
        except BaseException:
            for server in reversed(started):
                server.stop()
            raise
    handle = Router(started[-1].url, started[0].url, log_dir, started[::-1], config.network)
    atexit.register(handle.stop)
    return handle


def _start(
    config: Config, worker_urls: list[str], plugins, names: list[str], log_dir: Path, started: list[Server]
) -> None:
    """Start sglang-router and the front (``names``: its middlewares) into ``started``; return
    once both answer and sglang-router lists the engines."""
    # both start at once: the front loads its tokenizer while sglang-router finds its engines
    router = _sglang_router(config, worker_urls, log_dir)
    started.append(router)
    if names:
        started.append(_front(config, router.url, plugins, log_dir))
    router.wait_ready(timeout_s=30.0 if router.process is None else 120.0)
    _register(router, worker_urls, config.network.token)
    started[-1].wait_ready()


def _lost_port(server: Server) -> bool:
    """Whether ``server`` (started here) exited because its port was in use."""
    return (
        server.process is not None
        and server.process.poll() is not None
        and server.log_path is not None
        and ports.port_taken_in(server.log_path)
    )


def _sglang_router(config: Config, worker_urls: list[str], log_dir: Path) -> Server:
    """The configured sglang-router (``--sglang-router-ip/port``), or a new one for ``worker_urls``."""
    if config.get("sglang_router_ip"):
        return Server(
            f"http://{config.sglang_router_ip}:{config.sglang_router_port}",
            "the sglang-router given by --sglang-router-ip/--sglang-router-port",
            "check that it runs and that the address is right",
        )
    options = balancer.router_options(dict(config.router_args), worker_urls, config.network)
    return balancer.start(options, log_dir / "sglang-router.log", config.network.key_env())


def _register(router: Server, worker_urls: list[str], api_key: str | None) -> None:
    """Make sure ``router`` lists ``worker_urls``: add them to a router running elsewhere, wait
    for a router started here to register them (it does so in the background)."""
    workers = Workers(router.url, api_key=api_key)
    try:
        if router.process is None:
            for url in worker_urls:
                workers.add(url)
        else:
            workers.wait_listed(worker_urls)
    except WorkerError as exc:
        raise RouterError(f"{exc}\n{log_tail(router.log_path)}") from exc


def _front(config: Config, router_url: str, plugins, log_dir: Path) -> Server:
    """Start the middleware front in front of ``router_url`` (on the router's host)."""
    host = balancer.router_host(dict(config.router_args), config.network)
    port = ports.free_port(host)
    config_path = log_dir / "front-config.pkl"
    config_path.write_bytes(pickle.dumps(_front_config(config, router_url)))
    command = [
        sys.executable,
        "-m",
        "slime_router.front",
        "--config",
        str(config_path),
        "--host",
        host,
        "--port",
        str(port),
    ]
    log_path = log_dir / "front.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_front_env(plugins, config.network),
            preexec_fn=die_with_parent,
        )
    return Server(
        f"http://{connect_host(host)}:{port}", "slime-router's middleware front", FRONT_HINT, process, log_path
    )


def _front_config(config: Config, router_url: str):
    """A copy of ``config`` whose ``sglang_router_ip/port`` name the sglang-router behind the
    front, without the run's token: the copy is a file in the run directory, and the token
    reaches the front by its environment (`_front_env`)."""
    host, _, port = router_url.removeprefix("http://").rpartition(":")
    return config.replace(
        sglang_router_ip=host, sglang_router_port=int(port), network=dataclasses.replace(config.network, token=None)
    )


def _front_env(plugins, network) -> dict[str, str]:
    """The environment, with the run's local ``-p`` plugins (`Plugins.worker_env`) and its
    keys (`Network.key_env`)."""
    return {**os.environ, **plugins.worker_env(), **network.key_env()}
