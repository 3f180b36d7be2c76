"""A port taken between pick and bind, on the route of a real run: the run picks a port for its
engine server and for sglang-router, and before either binds it, another socket does (for the
engine: in the engine's own Ray actor, right after the pick; for the router: in the driver).
Each server exits with ``address already in use`` and is started again on a fresh port; the
run comes up and finishes, and the taken ports are never used. The train ranks' rendezvous
leaves no such window: the driver serves their store on a port it binds as it picks it."""

import importlib
import json
import socket
import sys
from pathlib import Path

import pytest

from slime_core import hookimpl
from slime_core.testing import command_line, processes_running

pytestmark = pytest.mark.integration

#: A local plugin (imported by name in the engine's actor, found through PYTHONPATH): the CPU
#: engine's command, except that the first port its actor picks is taken by this plugin first.
THIEF = """
import socket
from pathlib import Path

from slime_core import hookimpl
from slime_sglang.servers import cpu_engine_command

HELD = []  # the sockets that hold the taken ports, for the life of the actor


def command_after_theft(config, model_path, port, **where):
    if not HELD:
        thief = socket.socket()
        thief.bind(("127.0.0.1", port))
        thief.listen()
        HELD.append(thief)
        with open(Path(__file__).parent / "taken_engine_port", "w") as record:
            record.write(str(port))
    return cpu_engine_command(config, model_path, port, **where)


@hookimpl
def slime_register_rollout_engines(register):
    register("cpu_port_taken", command_after_theft)
"""


class RouterPortThief:
    """Stands in for `slime_core.cluster.ports` in the router's launcher: the first port it hands out is
    bound (and listened on) by a socket of this test before it is returned."""

    def __init__(self, ports):
        self._ports, self.held, self.taken = ports, [], []

    def free_port(self, host):
        port = self._ports.free_port(host)
        if not self.held:
            thief = socket.socket()
            thief.bind((host, port))
            thief.listen()
            self.held.append(thief)
            self.taken.append(port)
        return port

    def __getattr__(self, name):
        return getattr(self._ports, name)


class EnginePort:
    """Notes the port of the run's engine server once the run is up."""

    def __init__(self, model_dir):
        self.model_dir, self.port = str(model_dir), None

    @hookimpl
    def slime_before_rollout(self, rollout_id, config):
        (pid,) = processes_running("engine", "serve", self.model_dir)
        argv = command_line(pid).split()
        self.port = int(argv[argv.index("--port") + 1])


@pytest.fixture
def thief_plugin(tmp_path, monkeypatch):
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "port_thief_plugin.py").write_text(THIEF)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", str(folder))  # the run hands it on to its actors
    module = importlib.import_module("port_thief_plugin")
    yield module, folder
    for sock in module.HELD:
        sock.close()
    sys.modules.pop("port_thief_plugin", None)


def test_a_run_comes_up_when_its_ports_are_taken_before_they_are_bound(
    slime_run, thief_plugin, tiny_model_dir, monkeypatch, capfd, tmp_path
):
    from slime_router import balancer

    plugin, folder = thief_plugin
    router_thief = RouterPortThief(balancer.ports)
    monkeypatch.setattr(balancer, "ports", router_thief)
    engine = EnginePort(tiny_model_dir)
    try:
        records = slime_run("--num-rollout", "1", "--rollout-engine", "cpu_port_taken", hooks=[plugin, engine])
    finally:
        for sock in router_thief.held:
            sock.close()
    taken_engine_port = int((folder / "taken_engine_port").read_text())
    (taken_router_port,) = router_thief.taken
    assert records[-1]["rollout/samples"] == 64
    assert engine.port is not None and engine.port != taken_engine_port
    log = _engine_log(tmp_path / "run")
    assert f"{taken_engine_port}" in log and "address already in use" in log.lower(), log[-2000:]
    router_url = json.loads((tmp_path / "run" / "placement.json").read_text())["parts"]["router"]["url"]
    assert not router_url.endswith(f":{taken_router_port}")
    assert "a port was taken before sglang-router" in capfd.readouterr().err


def _engine_log(run_dir: Path) -> str:
    """The log of the run's engine 0 (``engines/engine_0.log`` in the run directory), which a
    server started again on a fresh port goes on writing after the first one's lines."""
    return (run_dir / "engines" / "engine_0.log").read_text(errors="replace")


class _JoiningRank:
    """A stand-in train rank: joins the group's default process group as a backend's rank does."""

    def __init__(self, config, rank, world_size, master_addr, master_port):
        from slime_core.rank.process_group import init_default_group

        init_default_group("gloo", master_addr, master_port, rank, world_size)
        self.rank, self.port = rank, master_port

    def rendezvous_port(self):
        return self.port

    def rank_sum(self):
        import torch
        import torch.distributed as dist

        total = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(total)
        return total.item()


class PickThief:
    """Stands in for `free_port`: every port it picks is bound (and listened on) by this test
    before it is returned, as another process could between the pick and the bind."""

    def __init__(self, free_port):
        self._free_port, self.held = free_port, []

    def __call__(self, host="127.0.0.1"):
        port = self._free_port(host)
        thief = socket.socket()
        thief.bind((host, port))
        thief.listen()
        self.held.append(thief)
        return port


def test_train_ranks_meet_on_a_port_bound_as_it_was_picked(ray_cluster, monkeypatch):
    """Two train ranks (Ray actors) form their group although every port picked with
    `free_port` meanwhile is taken at once; the port they meet on is held by the driver."""
    from slime_core import train_backend
    from slime_core.cluster import ports
    from slime_core.train_backend import TrainGroup

    thief = PickThief(ports.free_port)
    monkeypatch.setattr(ports, "free_port", thief)
    monkeypatch.setattr(train_backend, "free_port", thief, raising=False)  # where a26d9d3 picked the port
    group = TrainGroup(_JoiningRank, config=None, num_ranks=2)
    try:
        assert group.call("rank_sum") == [3.0, 3.0]
        (port, _) = group.call("rendezvous_port")
        with socket.socket() as late:
            with pytest.raises(OSError):
                late.bind(("127.0.0.1", port))  # the driver's store holds it for the group's life
    finally:
        group.shutdown()
        for sock in thief.held:
            sock.close()
