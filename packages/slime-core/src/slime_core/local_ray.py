"""A Ray instance started on this machine for one run (or one test session).

Such a Ray serves neither the dashboard nor the job server (``include_dashboard=False``), yet Ray
still starts its dashboard process and a dashboard agent, and, where ``ray[default]`` is
installed, has both load the full dashboard's modules (and the driver import their
dependencies): with Ray 2.60 on 2 cores, 4.7 CPU-s to start Ray and one actor against 4.1 with
the minimal set. Ray picks the full or the minimal set by whether the dashboard's dependencies
import, and has no option for it, so `start_local_ray` makes that check answer "not installed"
while it starts the processes: they come up as on a plain ``pip install ray``, which is all a
local run uses. A Ray version without that check starts as it would anyway. A cluster started
with ``ray start`` (where jobs are submitted) is not touched.
"""

from __future__ import annotations

from contextlib import contextmanager


def start_local_ray(**init_kwargs) -> None:
    """``ray.init(include_dashboard=False, **init_kwargs)`` with the minimal dashboard processes."""
    import ray

    with _minimal_dashboard_processes():
        ray.init(include_dashboard=False, **init_kwargs)


@contextmanager
def _minimal_dashboard_processes():
    """Ray's "are the dashboard's dependencies installed?" check answers no while inside."""
    from ray._private import utils

    check = getattr(utils, "get_dashboard_dependency_error", None)
    if check is None:
        yield
        return
    utils.get_dashboard_dependency_error = lambda: ImportError("a local slime Ray starts the minimal dashboard")
    try:
        yield
    finally:
        utils.get_dashboard_dependency_error = check
