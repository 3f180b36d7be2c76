"""A Ray instance started on this machine for one run (or one test session).

Such a Ray serves neither the dashboard nor the job server (``include_dashboard=False``), yet Ray
still starts its dashboard process and a dashboard agent, and, where ``ray[default]`` is
installed, has both load the full dashboard's modules (and the driver import their
dependencies): with Ray 2.60 on 2 cores, 4.7 CPU-s to start Ray and one actor against 4.1 with
the minimal set. Ray picks the full or the minimal set by whether the dashboard's dependencies
import, and has no option for it, so `start_local_ray` makes that check answer "not installed"
while it starts the processes: they come up as on a plain ``pip install ray``, which is all a
local run uses. A Ray version without that check starts as it would anyway.

Once it has started the raylet, ``ray.init`` asks GCS for the new node, and that check
(``ray._private.services.get_node``, a C++ loop) tries again a whole second later when the
raylet has not registered yet, which on 2 cores it has not (registering takes ~1 s): Ray came
up as much as a second after its raylet was ready. `start_local_ray` has that check made once
GCS lists the node alive, polled every `POLL_S`, so it succeeds at its first try (Ray's start
alone, 5 starts each in turn: median 3.40 s against 3.61 s; ``benchmarks/ray_start.py``). A
cluster started with ``ray start`` (where jobs are submitted) is not touched.

Ray starts its processes (GCS, raylet, and through the raylet every worker: train ranks, engine
actors) as children of the driver in the driver's process group. A SIGTERM to that whole group
(``timeout``, ``kill -- -PGID``, a job scheduler stopping the job) then killed Ray with the
driver, and the driver, unwinding, waited on the dead Ray for its 60 s GCS timeout.
`start_local_ray` starts them in a session of their own (``start_new_session``), so such a
signal reaches the driver alone, which stops every part as on Ctrl-C; they still die with the
driver if it is killed outright (Ray's ``PR_SET_PDEATHSIG``), and Ctrl-C in a terminal, which
Ray's processes ignore, reaches only the driver as before. Each such process leads a group of
its own and of what it starts (the raylet's: the workers and Ray's agents), so after
``ray.shutdown`` `kill_process_groups` ends whatever is left of them: after a lost GCS, Ray's
agents took up to a minute to notice on their own. Starting in a session of their own costs
nothing measurable (Ray's start alone, 7 starts each in turn on 2 cores: median 2.01 s against
2.02 s without; the comparison of ``benchmarks/ray_start.py`` with ``_in_own_session`` swapped out).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from contextlib import contextmanager

#: How often `start_local_ray` asks GCS whether the new raylet has registered.
POLL_S = 0.02
#: How long it asks before leaving the question to Ray's own check (and its error): past this,
#: a second more or less to come up no longer matters.
REGISTRATION_WAIT_S = 10.0


def start_local_ray(**init_kwargs) -> None:
    """``ray.init(include_dashboard=False, **init_kwargs)`` with the minimal dashboard processes,
    returning as soon as the raylet has registered (see the module docstring)."""
    import ray
    from ray._private import services, utils

    with (
        _replaced(utils, "get_dashboard_dependency_error", _dashboard_dependencies_missing),
        _replaced(services, "get_node", _once_registered),
        _replaced(services, "ConsolePopen", _in_own_session),
    ):
        ray.init(include_dashboard=False, **init_kwargs)


def ray_process_groups() -> list[int]:
    """The process groups of the local Ray this process started (the pids of its processes,
    each a group leader: see the module docstring); [] if it started none."""
    from ray._private import worker

    node = getattr(worker, "_global_node", None)
    if node is None:
        return []
    pids = [info.process.pid for infos in node.all_processes.values() for info in infos if info.process is not None]
    return [pid for pid in pids if _leads_group(pid)]


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def kill_process_groups(groups: list[int]) -> None:
    """SIGKILL what is left in ``groups`` (after ``ray.shutdown``: usually nothing)."""
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@contextmanager
def _replaced(module, name: str, replacement: Callable[[Callable], Callable]):
    """``module.name`` is ``replacement(module.name)`` while inside; a Ray version without that
    name starts as it would anyway."""
    original = getattr(module, name, None)
    if original is None:
        yield
        return
    setattr(module, name, replacement(original))
    try:
        yield
    finally:
        setattr(module, name, original)


def _dashboard_dependencies_missing(check: Callable) -> Callable:
    """Ray's "are the dashboard's dependencies installed?" check, answering no."""
    return lambda: ImportError("a local slime Ray starts the minimal dashboard")


def _in_own_session(popen: type) -> Callable:
    """Ray's ``Popen`` for its processes, starting each in a session of its own (see the module
    docstring)."""
    return lambda *args, **kwargs: popen(*args, **{**kwargs, "start_new_session": True})


def _once_registered(check: Callable) -> Callable:
    """Ray's check for the new node (``services.get_node``), made once GCS lists it alive."""

    def check_once_registered(gcs_address: str, node_id: str):
        _wait_until_alive(gcs_address, node_id)
        return check(gcs_address, node_id)

    return check_once_registered


def _wait_until_alive(gcs_address: str, node_id: str) -> None:
    """Return once GCS lists node ``node_id`` alive, or after `REGISTRATION_WAIT_S`. Ray's own
    check follows either way, so a raylet that never registers, or a GCS that cannot be asked,
    is reported by Ray as it would be without this wait."""
    from ray._private import services, state

    nodes = state.GlobalState()
    deadline = time.monotonic() + REGISTRATION_WAIT_S
    try:
        nodes._initialize_global_state(services._get_gcs_client_options(gcs_address))
        while time.monotonic() < deadline:
            if any(node["NodeID"] == node_id and node["Alive"] for node in nodes.node_table()):
                return
            time.sleep(POLL_S)
    except Exception:  # noqa: BLE001 - Ray's check, next, reports what is wrong
        return
    finally:
        nodes.disconnect()
