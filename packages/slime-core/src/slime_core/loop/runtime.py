"""The Ray runtime of a run: an existing one (a cluster, or a test's), or a local one."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import TYPE_CHECKING

from slime_core.cluster.local_ray import kill_process_groups, ray_process_groups, start_local_ray
from slime_core.cluster.ray_watch import watching

if TYPE_CHECKING:
    from slime_core.config import Config


@contextmanager
def ray_runtime(config: Config):
    """Use the Ray instance this process is already connected to, or the cluster named by
        ``--ray-address`` or ``RAY_ADDRESS`` (set by ``ray job submit`` for the job's command), or
        start a local one for the run (`start_local_ray`; shut down after it). Attached, the run starts no Ray of its
        own and at its end only disconnects: its actors and placement group are gone by then (the
        run's parts stop them), so the cluster is left as it was found. A local Ray keeps its files
        under ``RAY_TMPDIR`` when that is set. ``--actor-runtime inprocess`` needs none. A Ray that this
    run connected to or started is watched (`slime_core.cluster.ray_watch`): when its GCS stops answering,
    the run stops within about `LOST_AFTER_S` plus its parts' stop, naming the cluster."""
    if config.actor_runtime == "inprocess":
        yield
        return
    import ray

    if ray.is_initialized():
        yield
        return
    address = config.get("ray_address") or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=True)
    else:
        # Ray starts its workers at nice 15; here the workers (train ranks, engines) are the work,
        # and on a shared machine that priority alone made steps about 3x slower. Ray also starts
        # workers for the driver ahead of time: one became the engine's actor, the others stayed
        # idle (the train ranks need workers with environment variables of their own); without
        # them the engine's actor starts its worker on demand, and start-up used 1.5-2 CPU-s less
        # on 2 cores (benchmarks/startup.py).
        temp_dir = {"_temp_dir": os.environ["RAY_TMPDIR"]} if os.environ.get("RAY_TMPDIR") else {}
        start_local_ray(
            num_cpus=max(os.cpu_count() or 1, _actors_needed(config)),
            log_to_driver=True,
            _system_config={"worker_niceness": 0, "prestart_worker_first_driver": False},
            **temp_dir,
        )
    local_groups = [] if address else ray_process_groups()
    try:
        with watching(ray.get_runtime_context().gcs_address):
            yield
    finally:
        ray.shutdown()
        kill_process_groups(local_groups)


def _actors_needed(config: Config) -> int:
    """Train ranks plus engines: each actor may reserve a CPU slot."""
    ranks = config.actor_num_nodes * config.actor_num_gpus_per_node
    engines = (config.rollout_num_gpus or 1) // max(config.rollout_num_gpus_per_engine, 1)
    return ranks + engines + 1
