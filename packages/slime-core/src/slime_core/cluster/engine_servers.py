"""Engine servers as child processes of Ray actors, for any rollout backend whose engine is a server.

`EngineServer` is the Ray actor of one engine. It starts the server with a command of the
backend's, ``command_fn(config, model_path, port) -> argv`` (called with ``host=`` the node's
IP as well when the run spans nodes); `wait_healthy` waits until ``/health`` answers,
`shutdown` stops it; its output goes to `engine_log` (in the run directory). The server dies
with its actor: it runs in its own process group and gets SIGTERM from the kernel when the
actor's process exits (``PR_SET_PDEATHSIG``), so a crashed run leaves no orphan server behind.
`start_servers` starts a run's engines side by side, `restart_server` replaces one, and
`stop_servers` stops them. slime-sglang's engine group (SGLang servers, the CPU engine) and
slime-vllm's (vLLM servers) run on them.

The run's token reaches the server in its environment (``slime_core.cluster.network.Network.key_env``),
never on its command line, which any local user can read.

Ports: the port is picked free just before the server starts, but a server binds it only
once its model is loaded, seconds later, and another process may take it meanwhile. A server
that exits because its port is in use (its log says ``address already in use``) is started
again on a fresh port, up to `PORT_ATTEMPTS` times, with a line on the actor's output.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from slime_core.cluster import ports
from slime_core.cluster.child_process import die_with_parent

if TYPE_CHECKING:
    from slime_core.config.config import Config

#: How many times a server whose port was taken before it bound it is started (see the module docstring).
PORT_ATTEMPTS = 3
RESTART_ATTEMPTS, RESTART_WAIT_S = 10, 3.0  # a lost node: Ray declares it dead within ~30 s by default


class EngineServer:
    """One engine server (a Ray actor: ``ray.remote(num_gpus=...)(EngineServer)``).

    Constructing it starts the server; `wait_healthy` waits until it answers, so that the
    servers of a group start side by side and each failure comes back as a plain error.
    """

    def __init__(self, config: Config, command_fn, model_path: str, index: int = 0):
        network = config.network
        if network.spans_nodes:
            network.use_node_interface_for_gloo()  # the server's weight-update group, over gloo on CPU
        self._launch = (config, command_fn, model_path, index)
        self._start()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._exit_quietly)

    def _start(self) -> None:
        """Start the server on a port free now (this node's IP when the run spans nodes, else
        the loopback), with the run's keys in its environment."""
        config, command_fn, model_path, index = self._launch
        network = config.network
        host = network.listen_host()
        self.port = ports.free_port(host)
        self.url = f"http://{host}:{self.port}"
        command = command_fn(config, model_path, self.port, **({"host": host} if network.spans_nodes else {}))
        self.log_path = engine_log(config, index, self.port)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:  # a replaced or restarted engine's log goes on after the last one's
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
                env={**os.environ, **network.key_env()},
            )

    def _exit_quietly(self, signum, frame) -> None:
        """SIGTERM (Ray stopping the actor): stop the server and leave at once. Ray's own
        handler raises SystemExit wherever the actor happens to be, and inside a finalizer
        (``Popen.__del__``) that printed a traceback into the run's output."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        os._exit(0)

    def wait_healthy(self, timeout_s: float = 600.0) -> str:
        """The server's URL once ``/health`` answers; if it exits or time runs out, stop it and
        raise, naming its log and the log's last line. A server that lost its port to another
        process is started again on a fresh one (see the module docstring)."""
        deadline = time.monotonic() + timeout_s
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                wait_healthy(self.process, self.url, max(deadline - time.monotonic(), 1.0))
                return self.url
            except (RuntimeError, TimeoutError) as exc:
                if attempt < PORT_ATTEMPTS and self.process.poll() is not None and ports.port_taken_in(self.log_path):
                    print(
                        f"engine server: port {self.port} was taken before the server could bind it "
                        f"(log: {self.log_path}); starting it again on a fresh port",
                        file=sys.stderr,
                        flush=True,
                    )
                    self._start()
                    continue
                self.shutdown()
                raise RuntimeError(f"{exc} (log: {self.log_path}; last line: {_last_line(self.log_path)!r})") from None

    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL the server's whole process group at once: for a server that failed (a hung
        or stopped process would not act on SIGTERM)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def shutdown(self) -> None:
        """Stop the server's whole process group (SIGTERM, then SIGKILL after 10 s)."""
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def engine_log(config: Config, index: int, port: int | None = None) -> Path:
    """Where engine ``index`` writes its output: ``engines/engine_<index>.log`` in the run
    directory (on the engine's node, when the run spans nodes); without one (an engine group
    started outside ``slime run``), ``$SLIME_ENGINE_LOG_DIR`` (default /tmp), by port."""
    if config.get("output_dir"):
        return Path(config.output_dir) / "engines" / f"engine_{index}.log"
    return Path(os.environ.get("SLIME_ENGINE_LOG_DIR", "/tmp")) / f"slime-engine-{port}.log"


def _last_line(path: Path) -> str:
    """The last non-empty line of a log (at most 300 characters)."""
    with open(path, "rb") as log:
        log.seek(max(0, log.seek(0, os.SEEK_END) - 4096))
        lines = [line.strip() for line in log.read().decode(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def start_servers(
    config: Config,
    command_fn,
    model_path: str,
    count: int,
    actor_options=None,
    first_index: int = 0,
    *,
    kind: str,
    gpus: int,
    engine_config=None,
) -> tuple[list[str], list]:
    """Start ``count`` `EngineServer` actors side by side (engines ``first_index`` ... of the
    run); their URLs and actors once all are healthy. ``kind`` names the engine in errors;
    each actor takes ``gpus`` GPUs unless ``actor_options(index) -> dict`` (the run's
    placement) says otherwise for that engine. ``engine_config(index) -> Config``, if given, is
    the config engine ``index`` is started with (its server group's options), else ``config``.
    If one does not come up, all are stopped and the error names each that failed."""
    import ray

    actor_class = ray.remote(num_cpus=0, num_gpus=gpus)(EngineServer)
    servers = [
        actor_class.options(**(actor_options(index) if actor_options else {})).remote(
            engine_config(first_index + index) if engine_config else config, command_fn, model_path, first_index + index
        )
        for index in range(count)
    ]
    urls, problems, lost = [], [], 0
    for index, ready in enumerate([server.wait_healthy.remote() for server in servers]):
        try:
            urls.append(ray.get(ready))
        except ray.exceptions.RayError as exc:
            lost += isinstance(exc, (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnschedulableError))
            problems.append(f"rollout engine {index} of {count} ({kind}) did not start: {_reason(exc)}")
    if problems:
        stop_servers(servers)
        raise (EnginesLost if lost == len(problems) else RuntimeError)("\n".join(problems))
    return urls, servers


def restart_server(servers: list, index: int, launch: tuple, *, kind: str, gpus: int) -> tuple[str, object]:
    """Kill engine ``index`` of ``servers`` (SIGKILL: it may be hung) and start a fresh one on
    the initial weights in its placement; its URL and actor once healthy. ``launch``:
    ``(config, command_fn, model_path, actor_options)`` as the engines were started. When its
    node was lost, its bundle moves to another node with room once Ray has declared the node
    dead; until then a start there fails, and is tried again (`RESTART_ATTEMPTS` times,
    `RESTART_WAIT_S` apart)."""
    import ray

    config, command_fn, model_path, actor_options = launch
    try:
        ray.get(servers[index].kill.remote(), timeout=30)
    except ray.exceptions.RayError:
        pass  # the actor is gone, and its server with it
    ray.kill(servers[index])
    place = (lambda _: actor_options(index)) if actor_options else None
    attempt = 1
    while True:
        try:
            (url,), (server,) = start_servers(
                config, command_fn, model_path, 1, place, first_index=index, kind=kind, gpus=gpus
            )
            return url, server
        except EnginesLost:  # scheduled on a node that was being lost: Ray moves the bundle, then it starts
            if attempt == RESTART_ATTEMPTS:
                raise
            attempt += 1
            time.sleep(RESTART_WAIT_S)


class EnginesLost(RuntimeError):
    """Every engine that did not start died with its actor, before its server could fail: its
    node was lost (its bundle was still placed there). Once Ray has placed the bundle on
    another node, starting it again can succeed."""


#: Seconds `stop_servers` waits for the servers to stop (each is killed 10 s after SIGTERM).
STOP_TIMEOUT_S = 30.0


def stop_servers(servers: list) -> None:
    """Stop the servers of `EngineServer` actors, all at once, then the actors."""
    if not servers:
        return
    import ray

    from slime_core.cluster import ray_watch

    if not ray_watch.lost():  # a lost cluster: the servers die with their actors, which die with their raylet
        stopping = [server.shutdown.remote() for server in servers]
        ray.wait(stopping, num_returns=len(stopping), timeout=STOP_TIMEOUT_S)  # each waits 10 s, then kills
    for server in servers:
        ray.kill(server)


def _reason(error) -> str:
    """The error an actor raised (a dead actor's message ends with it)."""
    cause = getattr(error, "cause", None)
    return str(cause) if cause is not None else str(error).strip().splitlines()[-1]


def wait_healthy(process: subprocess.Popen, url: str, timeout_s: float = 120.0) -> None:
    """Return once ``url/health`` answers 200; raise if the process exits or time runs out.

    One client for every try: a new one per request builds a TLS context each time, ~25 ms
    of CPU per try, which the loading engine needs more."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the engine server for {url} exited with code {process.returncode}; see its log")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{url}/health").status_code == 200:
                    return
            time.sleep(0.1)
    raise TimeoutError(f"the engine server at {url} did not answer /health within {timeout_s:.0f} s")


def engine_count(config: Config) -> int:
    """How many engines to start: ``--rollout-num-gpus // --rollout-num-gpus-per-engine``.

    Unset ``--rollout-num-gpus`` means the training GPUs with ``--colocate``, else one engine.
    """
    per_engine = config.rollout_num_gpus_per_engine
    total = config.rollout_num_gpus
    if total is None:
        total = config.actor_num_nodes * config.actor_num_gpus_per_node if config.colocate else per_engine
    if per_engine < 1 or total < per_engine or total % per_engine:
        raise ValueError(
            f"--rollout-num-gpus {total} does not split into engines of --rollout-num-gpus-per-engine "
            f"{per_engine}; make it a positive multiple of it"
        )
    return total // per_engine


def health_problem(url: str, timeout: float) -> str | None:
    """Why the engine at ``url`` is failing (None when ``/health`` answers 200 in time)."""
    try:
        response = httpx.get(f"{url}/health", timeout=timeout, trust_env=False)
    except httpx.TimeoutException:
        return f"{url} gave no answer to /health within {timeout:g} s (hung)"
    except httpx.HTTPError as exc:
        return f"{url} did not answer /health ({type(exc).__name__}: died)"
    if response.status_code == 200:
        return None
    return f"{url} answered /health with {response.status_code}: {response.text[:500]}"
