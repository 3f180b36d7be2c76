"""Engine servers as child processes of Ray actors: real SGLang on GPUs, the CPU engine elsewhere.

`EngineServer` is the Ray actor of one engine. It starts the server with the command of its
kind, a registered rollout engine (``sglang``: ``python -m sglang.launch_server`` on the
actor's GPUs with every ``--sglang-*`` option passed through, by `slime_sglang.sglang_server`;
``cpu``: ``slime engine serve``; a plugin's: ``command(config, model_path, port) -> argv``,
called with ``host=`` the node's IP as well when the run spans nodes); `wait_healthy` waits
until ``/health`` answers, `shutdown` stops it; its output goes to `engine_log` (in the run
directory). The server dies with its actor: it runs in
its own process group and gets SIGTERM from the kernel when the actor's process exits
(``PR_SET_PDEATHSIG``), so a crashed run leaves no orphan server behind. `start_servers`
starts a run's engines side by side and `stop_servers` stops them (``slime_sglang.engine_group``).

The run's token reaches the server in its environment (``slime_core.cluster.network.Network.key_env``),
never on its command line, which any local user can read.

Ports: the port is picked free just before the server starts, but a server binds it only
once its model is loaded, seconds later, and another process may take it meanwhile. A server
that exits because its port is in use (its log says ``address already in use``) is started
again on a fresh port, up to `PORT_ATTEMPTS` times, with a line on the actor's output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from slime_core.cluster import ports
from slime_core.cluster.child_process import die_with_parent
from slime_core.cluster.command_flags import as_flags
from slime_core.cluster.network import LOOPBACK
from slime_core.data.prompt_budget import shortens_responses
from slime_sglang.cpu_engine.launch import wait_healthy

if TYPE_CHECKING:
    from slime_core.config.config import Config

#: How many times a server whose port was taken before it bound it is started (see the module docstring).
PORT_ATTEMPTS = 3


def sglang_command(config: Config, model_path: str, port: int, host: str = LOOPBACK) -> list[str]:
    """``sglang.launch_server`` for one engine, through `slime_sglang.sglang_server` (which
    gives it the run's keys from the environment); ``config.sglang`` holds the pass-through options."""
    own = {"model_path": model_path, "host": host, "port": port, "tp_size": config.rollout_num_gpus_per_engine}
    return [sys.executable, "-m", "slime_sglang.sglang_server", *as_flags(own), *as_flags(config.sglang)]


#: The ``--sglang-*`` options that the CPU engine takes as well (same meaning as SGLang's);
#: it has no use for the others (memory fractions, CUDA graphs, ...), which are for SGLang.
CPU_ENGINE_SGLANG_OPTIONS = ("max_running_requests", "context_length")


def seeds_each_copy(command_fn: Callable) -> Callable:
    """Mark a rollout engine's command (``slime_register_rollout_engines``) whose server draws
    copy i of a request for n samples with ``slime_core.engine.parallel_sample_seed(seed, i)``:
    its engines then declare ``per_copy_seeds`` (`slime_sglang.engine_group.EngineGroup`), and the
    default rollout sends a group request its seed. SGLang gives every copy the same seed."""
    command_fn.seeds_each_copy = True
    return command_fn


@seeds_each_copy
@shortens_responses
def cpu_engine_command(config: Config, model_path: str, port: int, host: str = LOOPBACK) -> list[str]:
    """``slime engine serve`` for one CPU engine, with the ``--sglang-*`` options it shares
    with SGLang (`CPU_ENGINE_SGLANG_OPTIONS`); it takes the run's keys from its environment. It
    shortens a response to fit its context (`shortens_responses`), where SGLang refuses it."""
    slime = str(Path(sys.executable).with_name("slime"))
    own = {"model": model_path, "host": host, "port": port}
    shared = {key: config.sglang.get(key) for key in CPU_ENGINE_SGLANG_OPTIONS}
    return [slime, "engine", "serve", *as_flags(own), *as_flags(shared)]


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
    config: Config, command_fn, model_path: str, count: int, actor_options=None, first_index: int = 0
) -> tuple[list[str], list]:
    """Start ``count`` `EngineServer` actors side by side (engines ``first_index`` ... of the
    run); their URLs and actors once all are healthy. The CPU engine takes no GPU; every other
    engine ``--rollout-num-gpus-per-engine``; ``actor_options(index) -> dict`` (the run's
    placement) overrides that per engine.
    If one does not come up, all are stopped and the error names each that failed."""
    import ray

    gpus = 0 if config.rollout_engine == "cpu" else config.rollout_num_gpus_per_engine
    actor_class = ray.remote(num_cpus=0, num_gpus=gpus)(EngineServer)
    servers = [
        actor_class.options(**(actor_options(index) if actor_options else {})).remote(
            config, command_fn, model_path, first_index + index
        )
        for index in range(count)
    ]
    urls, problems, lost = [], [], 0
    for index, ready in enumerate([server.wait_healthy.remote() for server in servers]):
        try:
            urls.append(ray.get(ready))
        except ray.exceptions.RayError as exc:
            lost += isinstance(exc, (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnschedulableError))
            problems.append(
                f"rollout engine {index} of {count} ({config.rollout_engine}) did not start: {_reason(exc)}"
            )
    if problems:
        stop_servers(servers)
        raise (EnginesLost if lost == len(problems) else RuntimeError)("\n".join(problems))
    return urls, servers


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
