"""A local Ray of a run or a test session starts its dashboard processes minimal, even where
``ray[default]`` (the full dashboard's dependencies, installed here for the job server) is present."""

import os

from slime_core.testing import command_line, descendants


def test_the_dashboard_process_of_a_local_ray_is_minimal(ray_cluster):
    """The session's Ray is started by `slime_core.testing.ray_session`, as a run's own by
    `slime_core.loop.runtime`: both through `start_local_ray`."""
    import ray.dashboard.optional_deps  # noqa: F401  (the full dashboard could load here)

    commands = [command_line(pid) for pid in descendants(os.getpid())]
    dashboards = [command for command in commands if "dashboard/dashboard.py" in command]
    assert len(dashboards) == 1, commands
    assert "--minimal" in dashboards[0].split()
