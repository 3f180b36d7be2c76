"""Where a run's actors go: one Ray placement group with a bundle per device.

Training ranks get one bundle each (a GPU, or on a CPU machine a CPU slot), and so do the
ranks of a PPO critic (``--advantage-estimator ppo``). Disaggregated
engines get one bundle each, holding ``--rollout-num-gpus-per-engine`` GPUs (CPU engines: a
CPU slot). Colocated engines share the training ranks' bundles, taking a fraction of each GPU
while the ranks take the rest (they take turns: the ranks offload while engines generate).
Reserving everything up front makes a run that cannot fit fail at once, with the count it
asked for, instead of hanging while some actors wait for devices.

On a CPU machine the cores are the devices: each training rank gets its share as torch
threads (`rank_threads`), less one core per CPU engine when engines generate while the ranks
train (``--train-mode async``, not colocated), the way disaggregated GPUs never overlap.
Sharing cores that both sides use at once would slow both (the 2-core quickstart in async
mode: 0.60 s per step of training instead of 0.31).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from slime_core.train_backend import cpu_thread_options

#: Colocated on a GPU: the share each side asks Ray for (they never run at the same time).
COLOCATED_TRAIN_GPU, COLOCATED_ENGINE_GPU = 0.6, 0.3
RESERVE_TIMEOUT_S = 120.0


@dataclass
class Placement:
    group: Any  # ray.util.placement_group.PlacementGroup
    num_ranks: int
    critic_ranks: int  # as many as num_ranks for PPO, else 0
    colocate: bool
    gpu: bool
    engine_bundles: list[dict[str, float]]  # the rollout backend's bundle per engine it starts
    rank_threads: int = 0  # torch threads of a CPU training rank (0 on GPUs)

    @classmethod
    def reserve(cls, config, engine_bundles: list[dict[str, float]]) -> Placement:
        """The run's placement group, ready; an error naming what could not be reserved.
        ``engine_bundles``: one per engine the rollout backend starts
        (`slime_core.rollout_backend.RolloutBackend.engine_bundles`)."""
        import ray
        import torch
        from ray.util.placement_group import placement_group

        gpu = torch.cuda.is_available()
        ranks, critic = train_ranks(config)
        if config.colocate and any(bundle.get("GPU", 0) > 1 for bundle in engine_bundles):
            raise ValueError("--colocate with --rollout-num-gpus-per-engine > 1 is not supported yet: an engine "
                             "would span several training ranks' GPUs; use 1, or run disaggregated")
        unit = {"GPU": 1, "CPU": 1} if gpu else {"CPU": 1}
        colocated = config.colocate and ranks > 0  # engines alone (--debug-rollout-only) need bundles of their own
        bundles = [unit] * (ranks + critic) + ([] if colocated else list(engine_bundles))
        group = placement_group(bundles, strategy="PACK")
        ready, _ = ray.wait([group.ready()], timeout=RESERVE_TIMEOUT_S)
        if not ready:
            ray.util.remove_placement_group(group)
            raise RuntimeError(f"Ray could not reserve {len(bundles)} bundles {bundles} in {RESERVE_TIMEOUT_S:.0f} s "
                               f"(cluster: {ray.cluster_resources()}); lower --actor-num-gpus-per-node or "
                               "--rollout-num-gpus, or add nodes")
        threads = 0 if gpu else rank_threads(config, ranks, cpu_engines(engine_bundles))
        return cls(group, ranks, critic, colocated, gpu, list(engine_bundles), threads)

    @classmethod
    def in_process(cls, config, engine_bundles: list[dict[str, float]]) -> Placement:
        """``--actor-runtime inprocess``: nothing reserved, every part in this process."""
        ranks, critic = train_ranks(config)
        return cls(None, ranks, critic, config.colocate, False, list(engine_bundles))

    def describe(self) -> str:
        """What was reserved, and for what (only the parts this run has)."""
        if self.group is None:
            return f"placement: in process ({self.num_ranks} training rank, no Ray)"
        parts = [f"{self.num_ranks} training ranks"] if self.num_ranks else []
        parts += [f"{self.critic_ranks} critic ranks"] if self.critic_ranks else []
        if self.engine_bundles:
            parts.append("engines sharing the ranks' bundles" if self.colocate else "engines one bundle per engine")
        return f"placement: {len(self.group.bundle_specs)} bundles ({', '.join(parts) or 'nothing'})"

    def train_options(self, rank: int) -> dict:
        """Ray actor options of training rank ``rank``."""
        if self.group is None:
            return {}
        gpus = (COLOCATED_TRAIN_GPU if self.colocate else 1) if self.gpu else 0
        threads = {} if self.gpu else cpu_thread_options(self.rank_threads)
        return {"num_cpus": 0, "num_gpus": gpus, "scheduling_strategy": self._bundle(rank), **threads}

    def critic_options(self, rank: int) -> dict:
        """Ray actor options of the PPO critic's rank ``rank`` (bundles after the policy's)."""
        if self.group is None:
            return {}
        return {**self.train_options(rank), "scheduling_strategy": self._bundle(self.num_ranks + rank)}

    def engine_options(self, index: int) -> dict:
        """Ray actor options of engine ``index``: in its own bundle, or colocated in a training
        rank's, taking a share of that rank's GPU."""
        if self.group is None:
            return {}
        bundle = index if self.colocate else self.num_ranks + self.critic_ranks + index
        engine_gpus = self.engine_bundles[index].get("GPU", 0) if index < len(self.engine_bundles) else 0
        gpus = (COLOCATED_ENGINE_GPU if self.colocate else engine_gpus) if engine_gpus else 0
        return {"num_cpus": 0, "num_gpus": gpus, "scheduling_strategy": self._bundle(bundle)}

    def release(self) -> None:
        if self.group is None:
            return
        import ray

        ray.util.remove_placement_group(self.group)

    def _bundle(self, index: int):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=index)


def train_ranks(config) -> tuple[int, int]:
    """(policy ranks, critic ranks) the run starts: none with --debug-rollout-only."""
    if config.get("debug_rollout_only"):
        return 0, 0
    ranks = config.actor_num_nodes * config.actor_num_gpus_per_node
    return ranks, ranks if config.advantage_estimator == "ppo" else 0


def cpu_engines(engine_bundles: list[dict[str, float]]) -> int:
    """How many of the engines run on CPU cores (bundles without a GPU)."""
    return sum(1 for bundle in engine_bundles if not bundle.get("GPU"))


def rank_threads(config, num_ranks: int, num_cpu_engines: int) -> int:
    """Torch threads of each CPU training rank: this machine's cores, less those of CPU engines
    that generate while the ranks train (see the module docstring), shared by the ranks."""
    busy = num_cpu_engines if config.train_mode == "async" and not config.colocate else 0
    return max(1, ((os.cpu_count() or 1) - busy) // max(1, num_ranks))
