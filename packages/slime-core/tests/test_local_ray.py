"""A local Ray of a run or a test session starts its dashboard processes minimal, even where
``ray[default]`` (the full dashboard's dependencies, installed here for the job server) is present,
and comes up as soon as its raylet has registered."""

import json
import os
import subprocess
import sys

from slime_core.testing import command_line, descendants


def test_the_dashboard_process_of_a_local_ray_is_minimal(ray_cluster):
    """The session's Ray is started by `slime_core.testing.ray_session`, as a run's own by
    `slime_core.loop.runtime`: both through `start_local_ray`."""
    import ray.dashboard.optional_deps  # noqa: F401  (the full dashboard could load here)

    commands = [command_line(pid) for pid in descendants(os.getpid())]
    dashboards = [command for command in commands if "dashboard/dashboard.py" in command]
    assert len(dashboards) == 1, commands
    assert "--minimal" in dashboards[0].split()


#: Starts a local Ray in a fresh interpreter with Ray's check for the new node timed; prints the
#: seconds of each call. A temporary folder of its own: a test session's Ray is already running here.
TIMED_START = """
import json, os, shutil, tempfile, time
folder = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit in 108 bytes
os.environ.update(HOME=folder, RAY_TMPDIR=folder)
import ray
from ray._private import services
from slime_core.cluster.local_ray import start_local_ray

calls, ray_check = [], services.get_node

def timed(gcs_address, node_id):
    start = time.monotonic()
    try:
        return ray_check(gcs_address, node_id)
    finally:
        calls.append(time.monotonic() - start)

services.get_node = timed
try:
    start_local_ray(num_cpus=1, _temp_dir=folder)
    ray.shutdown()
finally:
    shutil.rmtree(folder, ignore_errors=True)
print(json.dumps(calls))
"""


def test_ray_checks_the_new_raylet_once_it_has_registered():
    """Asked before the raylet registered (it takes ~1 s here), Ray's check waits a whole
    second before asking again; asked once GCS lists the node, it answers at once."""
    done = subprocess.run([sys.executable, "-c", TIMED_START], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    calls = json.loads(done.stdout.splitlines()[-1])
    assert len(calls) == 1 and calls[0] < 0.9, calls
