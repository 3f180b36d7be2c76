"""Where a run's actors go: Ray placement groups with a bundle per device.

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

Across Ray nodes, what NCCL wants on one node is kept on one node, with slime's meaning of
the options: each of the ``--actor-num-nodes`` train nodes is a placement group of its
``--actor-num-gpus-per-node`` bundles with Ray's ``STRICT_PACK`` (all on one Ray node; a PPO
critic gets as many groups again), and the engines share one ``PACK`` group (as few nodes as
fit it) with a bundle per engine holding its ``--rollout-num-gpus-per-engine`` GPUs, so an
engine's tensor-parallel group is on one node too (Ray never splits a bundle; an engine is
one actor that starts one server over all its GPUs). Train nodes may share a Ray node that
has room for both. The run's bundles are numbered across its groups: train nodes first,
then the critic's, then the engines'. ``--train-node-resource`` and
``--rollout-node-resource`` steer the ranks' and the engines' bundles to the nodes started
with that custom resource (e.g. inference nodes apart from training nodes). Once reserved,
the bundles say on which nodes the run lies: more than one, and its servers listen on their
node's address and the run's token guards all their routes, not only the control endpoints
(`slime_core.cluster.network`); `record` is
what the run directory keeps of it (``placement.json``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slime_core.cluster import ray_watch
from slime_core.cluster.network import Network, gloo_interface
from slime_core.train_backend import cpu_thread_options

if TYPE_CHECKING:
    from slime_core.config import Config

#: Colocated on a GPU: the share each side asks Ray for (they never run at the same time).
COLOCATED_TRAIN_GPU, COLOCATED_ENGINE_GPU = 0.6, 0.3
RESERVE_TIMEOUT_S = 120.0
#: How long stopping a run waits for Ray to give its bundles back (it takes milliseconds).
RELEASE_TIMEOUT_S = 10.0
#: What a bundle asks of a ``--*-node-resource``: a node started with ``{NAME: 1}`` holds 10,000 such bundles.
NODE_RESOURCE_SHARE = 0.0001


@dataclass
class Placement:
    groups: list[Any]  # ray.util.placement_group.PlacementGroup: train nodes, critic nodes, engines ([] in process)
    num_ranks: int
    critic_ranks: int  # as many as num_ranks for PPO, else 0
    colocate: bool
    gpu: bool
    engine_bundles: list[dict[str, float]]  # the rollout backend's bundle per engine it starts
    rank_threads: int = 0  # torch threads of a CPU training rank (0 on GPUs)
    nodes: list[tuple[str, str]] = field(default_factory=list)  # (Ray node id, node IP) of each bundle
    network: Network = field(default_factory=Network)

    @classmethod
    def reserve(cls, config: Config, engine_bundles: list[dict[str, float]], gpu: bool | None = None) -> Placement:
        """The run's placement groups, ready; an error naming what could not be reserved.
        ``engine_bundles``: one per engine the rollout backend starts
        (`slime_core.rollout_backend.RolloutBackend.engine_bundles`); ``gpu``: whether the
        ranks take GPUs (default: whether the cluster has any, `cluster_has_gpus`)."""
        gpu = cluster_has_gpus() if gpu is None else gpu
        ranks, critic = train_ranks(config)
        if config.colocate and any(bundle.get("GPU", 0) > 1 for bundle in engine_bundles):
            raise ValueError(
                "--colocate with --rollout-num-gpus-per-engine > 1 is not supported yet: an engine "
                "would span several training ranks' GPUs; use 1, or run disaggregated"
            )
        colocated = config.colocate and ranks > 0  # engines alone (--debug-rollout-only) need bundles of their own
        groups = _reserved(group_layout(config, engine_bundles, gpu, colocated), config)
        threads = 0 if gpu else rank_threads(config, ranks, cpu_engines(engine_bundles))
        nodes = [node for group in groups for node in bundle_nodes(group)]
        return cls(
            groups,
            ranks,
            critic,
            colocated,
            gpu,
            list(engine_bundles),
            threads,
            nodes,
            Network.for_nodes(len({node for node, _ in nodes})),
        )

    @classmethod
    def in_process(cls, config: Config, engine_bundles: list[dict[str, float]]) -> Placement:
        """``--actor-runtime inprocess``: nothing reserved, every part in this process."""
        ranks, critic = train_ranks(config)
        return cls([], ranks, critic, config.colocate, False, list(engine_bundles), network=Network.for_nodes(1))

    def describe(self) -> str:
        """What was reserved, and for what (only the parts this run has)."""
        if not self.groups:
            return f"placement: in process ({self.num_ranks} training rank, no Ray)"
        parts = [f"{self.num_ranks} training ranks"] if self.num_ranks else []
        parts += [f"{self.critic_ranks} critic ranks"] if self.critic_ranks else []
        if self.engine_bundles:
            parts.append("engines sharing the ranks' bundles" if self.colocate else "engines one bundle per engine")
        where = f" on {len({node for node, _ in self.nodes})} nodes" if self.network.spans_nodes else ""
        return f"placement: {len(self.nodes)} bundles{where} ({', '.join(parts) or 'nothing'})"

    def rendezvous(self) -> str:
        """Where a group of train ranks meets: the store the driver serves for it
        (`slime_core.rank.process_group.serve_store`) on this node's IP (the loopback on one node)."""
        return self.network.listen_host()

    def rank_bundle(self, rank: int, critic: bool = False) -> int:
        """The bundle of train rank ``rank`` (the critic's with ``critic``). The ranks take their
        bundles in node order, so those of one node are consecutive (tensor-parallel groups,
        which want NVLink, are made of consecutive ranks) and rank 0 is on the first node."""
        first, count = (self.num_ranks, self.critic_ranks) if critic else (0, self.num_ranks)
        return by_node(range(first, first + count), self.nodes)[rank]

    def engine_bundle(self, index: int) -> int:
        """The bundle engine ``index`` runs in."""
        return index if self.colocate else self.num_ranks + self.critic_ranks + index

    def record(self) -> dict[str, Any]:
        """Which node each part runs on, for ``placement.json`` in the run directory (bundles
        as Ray reports them now: after a lost node, where its bundles were placed again)."""
        if not self.groups:
            return {"spans_nodes": False, "parts": {}}
        import ray

        nodes = [node for group in self.groups for node in bundle_nodes(group)]
        bundles = {f"train_rank_{rank}": self.rank_bundle(rank) for rank in range(self.num_ranks)}
        bundles |= {f"critic_rank_{rank}": self.rank_bundle(rank, critic=True) for rank in range(self.critic_ranks)}
        bundles |= {f"engine_{index}": self.engine_bundle(index) for index in range(len(self.engine_bundles))}
        parts = {
            part: {"bundle": bundle, "node_id": nodes[bundle][0], "node_ip": nodes[bundle][1]}
            for part, bundle in bundles.items()
        }
        driver = ray.get_runtime_context().get_node_id()
        parts["driver"] = {"node_id": driver, "node_ip": _node_ips().get(driver, "")}
        return {"spans_nodes": self.network.spans_nodes, "parts": parts}

    def train_options(self, rank: int) -> dict:
        """Ray actor options of training rank ``rank``."""
        return self._rank_options(self.rank_bundle(rank))

    def critic_options(self, rank: int) -> dict:
        """Ray actor options of the PPO critic's rank ``rank`` (bundles after the policy's)."""
        return self._rank_options(self.rank_bundle(rank, critic=True))

    def _rank_options(self, bundle: int) -> dict:
        """A train rank's actor options in ``bundle``: its GPU (or torch threads on CPU), and
        across nodes the network interface its gloo groups use there."""
        if not self.groups:
            return {}
        gpus = (COLOCATED_TRAIN_GPU if self.colocate else 1) if self.gpu else 0
        threads = {} if self.gpu else cpu_thread_options(self.rank_threads)
        node, ip = self.nodes[bundle]
        interface = _on_node(node, gloo_interface, ip) if self.network.spans_nodes else None
        return self.network.actor_options(
            {"num_cpus": 0, "num_gpus": gpus, "scheduling_strategy": self._bundle(bundle), **threads}, interface
        )

    def engine_options(self, index: int) -> dict:
        """Ray actor options of engine ``index``: in its own bundle, or colocated in a training
        rank's, taking a share of that rank's GPU."""
        if not self.groups:
            return {}
        bundle = self.engine_bundle(index)
        engine_gpus = self.engine_bundles[index].get("GPU", 0) if index < len(self.engine_bundles) else 0
        gpus = (COLOCATED_ENGINE_GPU if self.colocate else engine_gpus) if engine_gpus else 0
        return {"num_cpus": 0, "num_gpus": gpus, "scheduling_strategy": self._bundle(bundle)}

    def release(self) -> None:
        """Give the bundles back, waiting at most `RELEASE_TIMEOUT_S`: once Ray's GCS is gone,
        ``remove_placement_group`` blocks for minutes (a lost cluster: not asked at all)."""
        import ray

        if not self.groups or ray_watch.lost():
            return
        if not ray_watch.bounded(
            lambda: [ray.util.remove_placement_group(group) for group in self.groups], RELEASE_TIMEOUT_S
        ):
            print(
                f"slime: Ray did not release the run's placement groups within {RELEASE_TIMEOUT_S:.0f} s (is its "
                f"GCS at {ray.get_runtime_context().gcs_address} alive?); going on",
                flush=True,
            )

    def _bundle(self, index: int):
        """The scheduling strategy that puts an actor in the run's bundle ``index``."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        for group in self.groups:
            if index < len(group.bundle_specs):
                return PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)
            index -= len(group.bundle_specs)
        raise IndexError("bundle index past the run's placement groups")


def cluster_has_gpus() -> bool:
    """Whether the Ray cluster this process is connected to has GPUs, where the ranks and the
    engines run. Not whether this process sees CUDA: a driver may sit on a CPU-only head node,
    and asking Ray spares the driver a torch import on the way to the first rollout."""
    import ray

    return ray.cluster_resources().get("GPU", 0) > 0


def group_layout(
    config: Config, engine_bundles: list[dict[str, float]], gpu: bool, colocated: bool
) -> list[tuple[str, list[dict[str, float]]]]:
    """(Ray strategy, bundles) of each placement group the run reserves: a ``STRICT_PACK``
    group per train node (the policy's, then a PPO critic's), each holding that node's GPUs
    (CPU slots on a CPU cluster), and one ``PACK`` group of the engines' bundles unless they
    share the ranks' (colocated)."""
    ranks, critic = train_ranks(config)
    train_nodes = config.actor_num_nodes * (2 if critic else 1) if ranks else 0
    unit = _on_nodes_with({"GPU": 1, "CPU": 1} if gpu else {"CPU": 1}, config.get("train_node_resource"))
    layout = [("STRICT_PACK", [unit] * config.actor_num_gpus_per_node) for _ in range(train_nodes)]
    engines = [_on_nodes_with(bundle, config.get("rollout_node_resource")) for bundle in engine_bundles]
    return layout + ([("PACK", engines)] if engines and not colocated else [])


def _reserved(layout: list[tuple[str, list[dict[str, float]]]], config: Config) -> list[Any]:
    """The placement groups of ``layout``, all ready within `RESERVE_TIMEOUT_S`; otherwise none
    is kept and the error names what was asked and what the cluster has."""
    import ray
    from ray.util.placement_group import placement_group

    groups = [placement_group(bundles, strategy=strategy) for strategy, bundles in layout]
    if not groups:
        return groups
    ready, _ = ray.wait([group.ready() for group in groups], num_returns=len(groups), timeout=RESERVE_TIMEOUT_S)
    if len(ready) == len(groups):
        return groups
    for group in groups:
        ray.util.remove_placement_group(group)
    asked = "; ".join(f"{strategy} {bundles}" for strategy, bundles in layout)
    steered = (
        " (bundles naming a custom resource need nodes started with it: ray start --resources)"
        if config.get("train_node_resource") or config.get("rollout_node_resource")
        else ""
    )
    raise RuntimeError(
        f"Ray could not reserve the run's placement groups [{asked}] in {RESERVE_TIMEOUT_S:.0f} s "
        f"(cluster: {ray.cluster_resources()}; STRICT_PACK: all on one node){steered}; lower "
        "--actor-num-gpus-per-node or --rollout-num-gpus, or add nodes"
    )


def _on_nodes_with(bundle: dict[str, float], resource: str | None) -> dict[str, float]:
    """``bundle``, placed only on nodes that have the custom ``resource`` (when one is named)."""
    return {**bundle, resource: NODE_RESOURCE_SHARE} if resource else bundle


def by_node(bundles, nodes: list[tuple[str, str]]) -> list[int]:
    """``bundles`` (indices) grouped by the IP of their node, in index order within a node
    (as given when ``nodes`` is empty: nothing reserved)."""
    return sorted(bundles, key=lambda bundle: (nodes[bundle][1], bundle)) if nodes else list(bundles)


def bundle_nodes(group) -> list[tuple[str, str]]:
    """(Ray node id, node IP) of each bundle of a ready placement group, in bundle order."""
    from ray.util import placement_group_table

    table = placement_group_table(group)["bundles_to_node_id"]
    ips = _node_ips()
    return [(table[index], ips.get(table[index], "")) for index in sorted(table)]


def _node_ips() -> dict[str, str]:
    import ray

    return {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()}


def _on_node(node_id: str, fn, *args):
    """``fn(*args)`` on Ray node ``node_id`` (here when it is the driver's, else as a small
    task pinned there): what only that node can tell, such as a free port or an interface name."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if node_id == ray.get_runtime_context().get_node_id():
        return fn(*args)
    there = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return ray.get(ray.remote(num_cpus=0)(fn).options(scheduling_strategy=there).remote(*args))


def train_ranks(config: Config) -> tuple[int, int]:
    """(policy ranks, critic ranks) the run starts: none with --debug-rollout-only."""
    if config.get("debug_rollout_only"):
        return 0, 0
    ranks = config.actor_num_nodes * config.actor_num_gpus_per_node
    return ranks, ranks if config.advantage_estimator == "ppo" else 0


def cpu_engines(engine_bundles: list[dict[str, float]]) -> int:
    """How many of the engines run on CPU cores (bundles without a GPU)."""
    return sum(1 for bundle in engine_bundles if not bundle.get("GPU"))


def rank_threads(config: Config, num_ranks: int, num_cpu_engines: int) -> int:
    """Torch threads of each CPU training rank: this machine's cores, less those of CPU engines
    that generate while the ranks train (see the module docstring), shared by the ranks."""
    busy = num_cpu_engines if config.train_mode == "async" and not config.colocate else 0
    return max(1, ((os.cpu_count() or 1) - busy) // max(1, num_ranks))
