"""``slime run`` across Ray nodes, on one machine: four Ray nodes in network namespaces
joined by a bridge, each with its own IP. Two train ranks (``--actor-num-nodes 2``) sit on
the two ``train`` nodes, one CPU each, so one rank each: their gloo group spans nodes. The
engine runs on one of two ``rollout`` nodes; as rollout 1 starts, that node is killed (every
process in its namespace, raylet included) and ``--use-fault-tolerance`` starts the engine
again on the other one, with no sample lost and the default ``--generate-max-retries``.

Needs root and ``ip`` (network namespaces); without them the test skips and says why.
"""

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from slime_core.loop.run_dir import read_metrics

pytestmark = [pytest.mark.integration, pytest.mark.slow]

VENV_BIN = Path(sys.executable).parent
REWARD_PLUGIN = '''
import time
from pathlib import Path

from slime_core import hookimpl

MARKS = Path(__file__).parent


def digit_share(sample, config) -> float:
    return sum(ch.isdigit() for ch in sample.response) / max(len(sample.response), 1)


@hookimpl
def slime_register_reward_functions(register):
    register("digit_share", digit_share)


@hookimpl
def slime_before_rollout(rollout_id, config):
    """Before rollout 1 sends a request, the test kills the engine's node: every request of
    the rollout then fails until the engine is back on another node."""
    if rollout_id == 1:
        (MARKS / "kill-engine-node").touch()
        while not (MARKS / "engine-node-killed").exists():
            time.sleep(0.05)
'''


def _namespaces_problem() -> str | None:
    """Why network namespaces cannot be made here (None when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"slimeprobe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Nodes:
    """Namespaces ``<prefix>0..3`` on a bridge, 10.X.Y.1..4; a Ray node in each (`start_ray`)."""

    def __init__(self, tmp: Path, count: int = 4):
        tag = uuid.uuid4().hex[:6]
        self.prefix, self.bridge = f"sl{tag}n", f"sl{tag}br"
        subnet = int(tag[:4], 16)
        self.ips = [f"10.{100 + subnet % 100}.{subnet // 100 % 250}.{i + 1}" for i in range(count)]
        self.names = [f"{self.prefix}{i}" for i in range(count)]
        # not the settings an in-process Ray of this test session left (RAY_AUTH_MODE, ...)
        inherited = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
        self.env = {**inherited, "HOME": str(tmp), "RAY_TMPDIR": str(tmp), "PYTHONPATH": str(tmp)}
        self.tmp = tmp

    def create(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        for i, (name, ip) in enumerate(zip(self.names, self.ips)):
            outside, inside = f"{self.prefix}{i}a", f"{self.prefix}{i}b"
            _ip("netns", "add", name)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", name)
            _ip("link", "set", outside, "master", self.bridge, "up")
            _ip("-n", name, "addr", "add", f"{ip}/24", "dev", inside)
            _ip("-n", name, "link", "set", inside, "up")
            _ip("-n", name, "link", "set", "lo", "up")

    def in_node(self, i: int, *command: str) -> list[str]:
        return ["ip", "netns", "exec", self.names[i], *command]

    def start_ray(self, i: int, num_cpus: int, resources: dict, attempts: int = 3) -> None:
        """A Ray node in namespace ``i`` (the head for 0) with ``num_cpus`` and ``resources``.
        ``ray start`` gives a raylet 30 s to register, which a loaded machine can miss: then
        the namespace is cleared and the node started again."""
        for _ in range(attempts):
            started = subprocess.run(
                self.in_node(i, *self._ray_start(i, num_cpus, resources)),
                env=self.env,
                capture_output=True,
                text=True,
                timeout=180,
            )
            if started.returncode == 0:
                return
            self.kill(i)
        raise AssertionError(
            f"ray start in {self.names[i]} failed {attempts} times:\n{(started.stdout + started.stderr)[-2000:]}"
        )

    def _ray_start(self, i: int, num_cpus: int, resources: dict) -> list[str]:
        role = (
            [
                "--head",
                "--port",
                "6379",
                "--temp-dir",
                str(self.tmp),
                "--include-dashboard",
                "false",
                # a lost node is declared dead after ~3 s instead of ~15 s
                "--system-config",
                json.dumps({"health_check_period_ms": 1000, "health_check_failure_threshold": 3}),
            ]
            if i == 0
            else ["--address", f"{self.ips[0]}:6379"]
        )
        return [
            str(VENV_BIN / "ray"),
            "start",
            *role,
            "--node-ip-address",
            self.ips[i],
            "--num-cpus",
            str(num_cpus),
            "--resources",
            json.dumps(resources),
            "--disable-usage-stats",
        ]

    def kill(self, i: int) -> list[int]:
        """SIGKILL every process in namespace ``i`` (its Ray node and all it started)."""
        pids = [
            int(pid)
            for pid in subprocess.run(
                ["ip", "netns", "pids", self.names[i]], capture_output=True, text=True
            ).stdout.split()
        ]
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        return pids

    def destroy(self) -> None:
        for i, name in enumerate(self.names):
            self.kill(i)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            subprocess.run(["ip", "link", "del", f"{self.prefix}{i}a"], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def cluster(tmp_path):
    """Four Ray nodes of 1 CPU each: 0 (the head) and 1 ``train``, 2 and 3 ``rollout``."""
    problem = _namespaces_problem()
    if problem:
        print(f"test_multinode skipped: {problem}")
        pytest.skip(problem)
    ray_dir = Path(f"/tmp/rn{uuid.uuid4().hex[:6]}")  # short: Ray's socket paths must stay under 108 bytes
    ray_dir.mkdir()
    nodes = Nodes(ray_dir)
    try:
        nodes.create()
        # one after the other: started side by side, a loaded machine misses Ray's start timeouts
        for node, role in enumerate(["train", "train", "rollout", "rollout"]):
            nodes.start_ray(node, 1, {role: 1})
        (ray_dir / "multinode_rewards.py").write_text(REWARD_PLUGIN)
        yield nodes
    finally:
        nodes.destroy()
        shutil.rmtree(ray_dir, ignore_errors=True)


def test_run_spans_nodes_and_survives_losing_the_engine_node(cluster, tiny_model_dir, tmp_path):
    """Two train ranks on two nodes learn together; the engine's node is lost mid-run."""
    data = tmp_path / "prompts.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}=", "label": str(a + b)}) + "\n" for a in range(10) for b in range(10))
    )
    run_dir = tmp_path / "run"
    command = [
        str(VENV_BIN / "slime"),
        "run",
        "-p",
        "multinode_rewards",
        "--ray-address",
        f"{cluster.ips[0]}:6379",
        "--train-node-resource",
        "train",
        "--rollout-node-resource",
        "rollout",
        "--actor-num-nodes",
        "2",
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--rollout-engine",
        "cpu",
        "--rm-type",
        "digit_share",
        "--rollout-batch-size",
        "8",
        "--n-samples-per-prompt",
        "8",
        "--rollout-max-response-len",
        "8",
        "--lr",
        "5e-3",
        "--use-dynamic-batch-size",
        "--max-tokens-per-gpu",
        "2048",
        "--num-rollout",
        "6",
        "--update-weight-transport",
        "broadcast",
        "--check-weight-update-equal",
        "--use-fault-tolerance",
        "--rollout-health-check-interval",
        "0.5",
        "--rollout-health-check-timeout",
        "3",
        "--output-dir",
        str(run_dir),
    ]
    with open(tmp_path / "driver.log", "wb") as log:
        driver = subprocess.Popen(cluster.in_node(0, *command), env=cluster.env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(cluster.tmp / "kill-engine-node", driver)  # rollout 0 is done, rollout 1 about to start
        placed = json.loads((run_dir / "placement.json").read_text())["parts"]
        engine_node = cluster.ips.index(placed["engine_0"]["node_ip"])
        ranks_at = [placed[f"train_rank_{rank}"]["node_ip"] for rank in range(2)]
        assert ranks_at == cluster.ips[:2] and engine_node in (2, 3), placed  # rank 0 on the first node
        assert cluster.kill(engine_node)  # the engine's node is lost, raylet and all
        (cluster.tmp / "engine-node-killed").touch()
        assert driver.wait(timeout=600) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
    records = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["rollout_id"] >= 0]
    assert [r["rollout_id"] for r in records] == list(range(6))
    assert all(r["rollout/samples"] == 64 for r in records)  # 8 prompts x 8 samples: none lost
    assert records[1]["rollout/samples_regenerated"] > 0  # its requests failed, and were sent again
    assert sum(r["fault/engine_restarts"] for r in records) == 1
    rewards = [r["rollout/reward_mean"] for r in records]
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.02, rewards  # it learns, as on one node
    assert records[-1]["weight_update/max_logprob_diff"] < 1e-3  # the new engine serves the trainer's weights
    moved = json.loads((run_dir / "placement.json").read_text())
    assert moved["spans_nodes"] and moved["parts"]["engine_0"]["node_ip"] == cluster.ips[5 - engine_node], moved
    log = (run_dir / "slime.log").read_text()
    assert "on 3 nodes" in log and "[fault tolerance] engine 0 failed (http://" in log
    assert _cluster_state(cluster) == {"alive_nodes": 3, "placement_groups_left": 0, "ray_heads_in_node_0": 1}


def _cluster_state(cluster: Nodes) -> dict:
    """What the run left: the Ray nodes alive (the lost one is gone, none was added), its
    placement groups not removed, and the Ray heads (GCS servers) running on the driver's node."""
    probe = (
        "import json, ray\n"
        f"ray.init(address='{cluster.ips[0]}:6379', log_to_driver=False)\n"
        "groups = ray.util.placement_group_table().values()\n"
        "print(json.dumps({'alive_nodes': sum(node['Alive'] for node in ray.nodes()),\n"
        "                  'placement_groups_left': sum(group['state'] != 'REMOVED' for group in groups)}))\n"
    )
    answer = subprocess.run(
        cluster.in_node(0, sys.executable, "-c", probe), env=cluster.env, capture_output=True, text=True, timeout=120
    )
    pids = subprocess.run(["ip", "netns", "pids", cluster.names[0]], capture_output=True, text=True).stdout.split()
    gcs = sum("gcs_server" in _command_line(pid) for pid in pids)
    return {**json.loads(answer.stdout.strip().splitlines()[-1]), "ray_heads_in_node_0": gcs}


def _command_line(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:  # it exited meanwhile
        return ""


def _wait_for(mark: Path, driver: subprocess.Popen, timeout_s: float = 400) -> None:
    """Until the file ``mark`` exists (the run's plugin made it)."""
    deadline = time.monotonic() + timeout_s
    while not mark.exists():
        assert driver.poll() is None, f"the run ended early (exit code {driver.returncode})"
        assert time.monotonic() < deadline, f"no {mark.name} within {timeout_s:.0f} s"
        time.sleep(0.2)
