"""Torch threads of CPU training ranks: their share of the cores, set in the rank's process
before torch loads."""

import os
from types import SimpleNamespace

import pytest
import torch  # as in a backend's rank module: unpickling the rank class in its process loads torch

from slime_core.cluster.placement import cpu_engines, rank_threads
from slime_core.train_backend import TrainGroup, _env_apart


def _config(train_mode="sync", colocate=False):
    return SimpleNamespace(train_mode=train_mode, colocate=colocate)


def test_ranks_share_the_cores_less_those_of_engines_generating_meanwhile(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert rank_threads(_config(), num_ranks=2, num_cpu_engines=2) == 4  # engines idle while ranks train
    assert rank_threads(_config("async"), num_ranks=2, num_cpu_engines=2) == 3  # 6 cores left for 2 ranks
    assert rank_threads(_config("async", colocate=True), num_ranks=2, num_cpu_engines=2) == 4  # they take turns
    assert rank_threads(_config("async"), num_ranks=8, num_cpu_engines=4) == 1  # at least one


def test_only_engine_bundles_without_a_gpu_count_as_cpu_engines():
    assert cpu_engines([{"CPU": 1}, {"CPU": 1}]) == 2
    assert cpu_engines([{"GPU": 2, "CPU": 1}] * 3) == 0  # engines on GPUs leave the cores to the ranks


class _ThreadReport:
    """A stand-in rank that reports how its process was started."""

    def __init__(self, config, rank, world_size, master_addr, master_port):
        self.threads = (os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads())

    def report(self):
        return self.threads


@pytest.mark.integration
def test_a_cpu_rank_starts_with_its_share_as_openmp_threads(ray_cluster):
    """Ray sets OMP_NUM_THREADS=1 in an actor's process; the rank's process sets its share
    instead before torch loads OpenMP (which reads the variable once, then)."""
    group = TrainGroup(_ThreadReport, config=None, num_ranks=1)
    share = os.cpu_count() or 1
    assert group.call("report") == [(str(share), share)]
    group.shutdown()


def test_a_rank_s_variables_leave_its_ray_options_for_its_process():
    """A runtime_env would cost each rank a worker of its own; one that holds more than
    variables (a user's pip or working_dir) is kept, without them."""
    options = {"num_cpus": 0, "runtime_env": {"env_vars": {"OMP_NUM_THREADS": "2"}}}
    assert _env_apart(options) == ({"num_cpus": 0}, {"OMP_NUM_THREADS": "2"})
    options["runtime_env"]["working_dir"] = "/code"
    assert _env_apart(options) == ({"num_cpus": 0, "runtime_env": {"working_dir": "/code"}}, {"OMP_NUM_THREADS": "2"})
    assert _env_apart({"num_gpus": 1}) == ({"num_gpus": 1}, {})
