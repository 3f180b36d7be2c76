"""A local Ray instance for tests that keeps its files out of ``$HOME`` and the system temp folder."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path


@contextlib.contextmanager
def ray_session(num_cpus: int = 4):
    """A local Ray instance whose auth token and session files live in a fresh temporary
    folder (not ``$HOME/.ray`` or the system temp folder), removed after shutdown. The
    folder is short on purpose: Ray's Unix socket paths must stay under 108 bytes."""
    import ray

    from slime_core.cluster.local_ray import start_local_ray

    work_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    saved = {key: os.environ.get(key) for key in ("HOME", "RAY_TMPDIR")}
    os.environ.update(HOME=str(work_dir), RAY_TMPDIR=str(work_dir))
    try:
        start_local_ray(
            num_cpus=num_cpus, _temp_dir=str(work_dir), log_to_driver=False, _system_config={"worker_niceness": 0}
        )
        yield
    finally:
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(work_dir, ignore_errors=True)
