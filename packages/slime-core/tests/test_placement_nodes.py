"""Placement across Ray nodes, without Ray: which bundle each train rank takes, the network
facts a run gets from how many nodes its bundles lie on (and the gloo interface of a rank's
node), and the node resources of bundles."""

from slime_core.cluster.network import LOOPBACK, Network
from slime_core.cluster.placement import NODE_RESOURCE_SHARE, Placement, _on_nodes_with


def test_ranks_take_their_bundles_node_by_node():
    # Ray placed bundles 0 and 2 on node b, 1 and 3 on node a (policy), 4 and 5 (critic) on b then a.
    nodes = [
        ("B", "10.0.0.2"),
        ("A", "10.0.0.1"),
        ("B", "10.0.0.2"),
        ("A", "10.0.0.1"),
        ("B", "10.0.0.2"),
        ("A", "10.0.0.1"),
    ]
    placement = Placement([], 4, 2, False, True, [], nodes=nodes)
    assert [placement.rank_bundle(rank) for rank in range(4)] == [1, 3, 0, 2]
    assert [placement.rank_bundle(rank, critic=True) for rank in range(2)] == [5, 4]
    assert Placement([], 2, 0, False, False, []).rank_bundle(1) == 1  # nothing reserved: in order


def test_a_run_on_one_node_stays_on_the_loopback_and_still_has_a_token():
    one, two = Network.for_nodes(1), Network.for_nodes(2)
    assert not one.spans_nodes and one.listen_host() == LOOPBACK and len(one.token) >= 32
    assert one.key_env() == {"SLIME_ADMIN_API_KEY": one.token}  # control endpoints only
    assert two.spans_nodes and len(two.token) >= 32 and two.token != Network.for_nodes(2).token
    assert two.key_env() == {"SLIME_ADMIN_API_KEY": two.token, "SLIME_API_KEY": two.token}  # every route
    assert Network().key_env() == {} and Network().auth_header() == {}
    assert Placement([], 1, 0, False, False, []).rendezvous() == LOOPBACK


def test_node_resources_steer_bundles():
    assert _on_nodes_with({"CPU": 1}, "rollout") == {"CPU": 1, "rollout": NODE_RESOURCE_SHARE}
    assert _on_nodes_with({"GPU": 1, "CPU": 1}, None) == {"GPU": 1, "CPU": 1}


def test_a_train_rank_across_nodes_gets_its_node_s_gloo_interface(monkeypatch):
    from slime_core.cluster.network import gloo_interface

    options = {"num_cpus": 0, "runtime_env": {"env_vars": {"OMP_NUM_THREADS": "2"}}}
    across = Network(spans_nodes=True, token="t").actor_options(options, "eth7")
    assert across["runtime_env"]["env_vars"] == {"OMP_NUM_THREADS": "2", "GLOO_SOCKET_IFNAME": "eth7"}
    assert Network().actor_options(options, "eth7") == options  # one node: the loopback, nothing to choose
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    assert gloo_interface(LOOPBACK) == "lo"  # the interface that holds the node's IP
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "ib0")
    assert gloo_interface(LOOPBACK) == "ib0"  # the user's choice on that node wins
