"""The placement groups a run reserves, on a real (local) Ray: a STRICT_PACK group per train
node with a bundle per device, one PACK group of the engines' bundles, each actor's bundle,
and an error that names the groups when the cluster cannot hold them."""

import pytest

from slime_core.cluster.placement import Placement, group_layout
from slime_core.config import Config


def _config(**values) -> Config:
    return Config(
        {
            "actor_num_nodes": 1,
            "actor_num_gpus_per_node": 1,
            "advantage_estimator": "grpo",
            "colocate": False,
            "train_mode": "sync",
            **values,
        }
    )


def test_each_train_node_is_one_strict_pack_group_of_a_bundle_per_gpu():
    # 2 nodes x 2 GPUs, PPO (a critic as large again), two engines of 2 GPUs each on inference nodes
    config = _config(
        actor_num_nodes=2, actor_num_gpus_per_node=2, advantage_estimator="ppo", rollout_node_resource="rollout"
    )
    layout = group_layout(config, [{"GPU": 2, "CPU": 1}] * 2, gpu=True, colocated=False)
    train_node = ("STRICT_PACK", [{"GPU": 1, "CPU": 1}] * 2)
    engines = ("PACK", [{"GPU": 2, "CPU": 1, "rollout": 0.0001}] * 2)
    assert layout == [train_node] * 4 + [engines]
    # colocated engines take shares of the ranks' bundles; a CPU cluster has CPU slots; no ranks, no train groups
    assert group_layout(_config(actor_num_gpus_per_node=3), [{"GPU": 1}], gpu=False, colocated=True) == [
        ("STRICT_PACK", [{"CPU": 1}] * 3)
    ]
    assert group_layout(_config(debug_rollout_only=True), [{"CPU": 1}], gpu=False, colocated=False) == [
        ("PACK", [{"CPU": 1}])
    ]


def test_actors_go_to_their_train_node_group_and_the_engines_group(ray_cluster):
    import ray
    from ray.util import placement_group_table

    placement = Placement.reserve(_config(actor_num_nodes=2), [{"CPU": 1}])
    try:
        assert placement.gpu is False and placement.rank_threads >= 1  # asked the cluster, which has no GPU
        table = [placement_group_table(group) for group in placement.groups]
        assert [(t["strategy"], len(t["bundles"])) for t in table] == [("STRICT_PACK", 1)] * 2 + [("PACK", 1)]
        chosen = [
            (
                options["scheduling_strategy"].placement_group.id,
                options["scheduling_strategy"].placement_group_bundle_index,
            )
            for options in (placement.train_options(0), placement.train_options(1), placement.engine_options(0))
        ]
        assert chosen == [(group.id, 0) for group in placement.groups]  # rank 0, rank 1, engine 0
        here = ray.get_runtime_context().get_node_id()
        record = placement.record()["parts"]
        assert {record[part]["node_id"] for part in ("train_rank_0", "train_rank_1", "engine_0")} == {here}
        assert placement.describe() == "placement: 3 bundles (2 training ranks, engines one bundle per engine)"
    finally:
        placement.release()
    assert {placement_group_table(group)["state"] for group in placement.groups} == {"REMOVED"}


def test_a_train_node_larger_than_any_ray_node_is_refused_and_nothing_is_kept(ray_cluster, monkeypatch):
    import ray

    monkeypatch.setattr("slime_core.cluster.placement.RESERVE_TIMEOUT_S", 1.0)
    cpus = int(ray.cluster_resources()["CPU"])
    before = set(ray.util.placement_group_table())
    with pytest.raises(RuntimeError) as error:
        Placement.reserve(_config(actor_num_gpus_per_node=cpus + 1), [], gpu=False)
    assert f"STRICT_PACK {[{'CPU': 1}] * (cpus + 1)}" in str(error.value) and "all on one node" in str(error.value)
    tried = {pg: group["state"] for pg, group in ray.util.placement_group_table().items() if pg not in before}
    assert list(tried.values()) == ["REMOVED"]  # the one group asked for, not kept
