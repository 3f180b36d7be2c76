"""``slime run`` across Ray nodes, on one machine: three Ray nodes in network namespaces
joined by a bridge, each with its own IP. The train rank sits on the head node (custom
resource ``train``), the engine on one of two ``rollout`` nodes; mid-run that node is killed
(every process in its namespace, raylet included) and ``--use-fault-tolerance`` starts the
engine again on the other one, with no sample lost.

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
from slime_core import hookimpl


def digit_share(sample, config) -> float:
    return sum(ch.isdigit() for ch in sample.response) / max(len(sample.response), 1)


@hookimpl
def slime_register_reward_functions(register):
    register("digit_share", digit_share)
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
    """Namespaces ``<prefix>0..2`` on a bridge, 10.X.Y.1..3; a Ray node in each (see `start`)."""

    def __init__(self, tmp: Path, count: int = 3):
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
            started = subprocess.run(self.in_node(i, *self._ray_start(i, num_cpus, resources)), env=self.env,
                                     capture_output=True, text=True, timeout=180)
            if started.returncode == 0:
                return
            self.kill(i)
        raise AssertionError(f"ray start in {self.names[i]} failed {attempts} times:\n"
                             f"{(started.stdout + started.stderr)[-2000:]}")

    def _ray_start(self, i: int, num_cpus: int, resources: dict) -> list[str]:
        role = (["--head", "--port", "6379", "--temp-dir", str(self.tmp), "--include-dashboard", "false",
                 # a lost node is declared dead after ~3 s instead of ~15 s
                 "--system-config", json.dumps({"health_check_period_ms": 1000, "health_check_failure_threshold": 3})]
                if i == 0 else ["--address", f"{self.ips[0]}:6379"])
        return [str(VENV_BIN / "ray"), "start", *role, "--node-ip-address", self.ips[i], "--num-cpus", str(num_cpus),
                "--resources", json.dumps(resources), "--disable-usage-stats"]

    def kill(self, i: int) -> list[int]:
        """SIGKILL every process in namespace ``i`` (its Ray node and all it started)."""
        pids = [int(pid) for pid in subprocess.run(["ip", "netns", "pids", self.names[i]], capture_output=True,
                                                   text=True).stdout.split()]
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
    """Three Ray nodes: 0 the head (2 CPUs, ``train``), 1 and 2 (1 CPU each, ``rollout``)."""
    problem = _namespaces_problem()
    if problem:
        print(f"test_multinode skipped: {problem}")
        pytest.skip(problem)
    ray_dir = Path(f"/tmp/rn{uuid.uuid4().hex[:6]}")  # short: Ray's socket paths must stay under 108 bytes
    ray_dir.mkdir()
    nodes = Nodes(ray_dir)
    try:
        nodes.create()
        nodes.start_ray(0, 2, {"train": 1})
        nodes.start_ray(1, 1, {"rollout": 1})
        nodes.start_ray(2, 1, {"rollout": 1})
        (ray_dir / "multinode_rewards.py").write_text(REWARD_PLUGIN)
        yield nodes
    finally:
        nodes.destroy()
        shutil.rmtree(ray_dir, ignore_errors=True)


def test_run_spans_nodes_and_survives_losing_the_engine_node(cluster, tiny_model_dir, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "label": str(a + b)}) + "\n"
                            for a in range(10) for b in range(10)))
    run_dir = tmp_path / "run"
    command = [str(VENV_BIN / "slime"), "run", "-p", "multinode_rewards", "--ray-address", f"{cluster.ips[0]}:6379",
               "--train-node-resource", "train", "--rollout-node-resource", "rollout",
               "--prompt-data", str(data), "--hf-checkpoint", str(tiny_model_dir), "--rollout-engine", "cpu",
               "--rm-type", "digit_share", "--rollout-batch-size", "8", "--n-samples-per-prompt", "8",
               "--rollout-max-response-len", "8", "--lr", "5e-3", "--use-dynamic-batch-size",
               "--max-tokens-per-gpu", "2048", "--num-rollout", "6", "--update-weight-transport", "broadcast",
               "--check-weight-update-equal", "--use-fault-tolerance", "--rollout-health-check-interval", "0.5",
               "--rollout-health-check-timeout", "3", "--generate-max-retries", "30", "--output-dir", str(run_dir)]
    with open(tmp_path / "driver.log", "wb") as log:
        driver = subprocess.Popen(cluster.in_node(0, *command), env=cluster.env, stdout=log, stderr=subprocess.STDOUT)
    try:
        placed = _wait_for_first_rollout(driver, run_dir)
        engine_node = cluster.ips.index(placed["engine_0"]["node_ip"])
        assert placed["train_rank_0"]["node_ip"] == cluster.ips[0] and engine_node in (1, 2), placed
        assert cluster.kill(engine_node)  # the engine's node is lost, raylet and all
        assert driver.wait(timeout=600) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
    records = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["rollout_id"] >= 0]
    assert [r["rollout_id"] for r in records] == list(range(6))
    assert all(r["rollout/samples"] == 64 for r in records)  # 8 prompts x 8 samples: none lost
    assert sum(r["fault/engine_restarts"] for r in records) == 1
    rewards = [r["rollout/reward_mean"] for r in records]
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.02, rewards  # it learns, as on one node
    assert records[-1]["weight_update/max_logprob_diff"] < 1e-3  # the new engine serves the trainer's weights
    moved = json.loads((run_dir / "placement.json").read_text())
    assert moved["spans_nodes"] and moved["parts"]["engine_0"]["node_ip"] == cluster.ips[3 - engine_node], moved
    log = (run_dir / "slime.log").read_text()
    assert "on 2 nodes" in log and "[fault tolerance] engine 0 at" in log
    assert _cluster_state(cluster) == {"alive_nodes": 2, "placement_groups_left": 0, "ray_heads_in_node_0": 1}


def _cluster_state(cluster: Nodes) -> dict:
    """What the run left: the Ray nodes alive (the lost one is gone, none was added), its
    placement groups not removed, and the Ray heads (GCS servers) running on the driver's node."""
    probe = ("import json, ray\n"
             f"ray.init(address='{cluster.ips[0]}:6379', log_to_driver=False)\n"
             "groups = ray.util.placement_group_table().values()\n"
             "print(json.dumps({'alive_nodes': sum(node['Alive'] for node in ray.nodes()),\n"
             "                  'placement_groups_left': sum(group['state'] != 'REMOVED' for group in groups)}))\n")
    answer = subprocess.run(cluster.in_node(0, sys.executable, "-c", probe), env=cluster.env, capture_output=True,
                            text=True, timeout=120)
    pids = subprocess.run(["ip", "netns", "pids", cluster.names[0]], capture_output=True, text=True).stdout.split()
    gcs = sum("gcs_server" in _command_line(pid) for pid in pids)
    return {**json.loads(answer.stdout.strip().splitlines()[-1]), "ray_heads_in_node_0": gcs}


def _command_line(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:  # it exited meanwhile
        return ""


def _wait_for_first_rollout(driver: subprocess.Popen, run_dir: Path, timeout_s: float = 400) -> dict:
    """The placement record's parts, once the run has finished its first rollout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert driver.poll() is None, f"the run ended early (exit code {driver.returncode})"
        metrics = run_dir / "metrics.jsonl"
        if metrics.is_file() and any(r["rollout_id"] >= 0 for r in read_metrics(metrics)):
            return json.loads((run_dir / "placement.json").read_text())["parts"]
        time.sleep(0.2)
    raise TimeoutError(f"no rollout finished within {timeout_s:.0f} s")
