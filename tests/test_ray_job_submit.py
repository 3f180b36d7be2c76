"""``ray job submit -- slime run CONFIG.yaml`` on a Ray cluster with a job server (a head
started by ``ray start`` with its dashboard, token and session files in a temporary folder):
the run attaches to that cluster (Ray gives the job's command ``RAY_ADDRESS``), trains, starts
no Ray of its own, and leaves no actor or placement group behind."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from slime_core.cluster.ports import free_port
from slime_core.loop.run_dir import read_metrics
from slime_core.testing import descendants, processes_running

pytestmark = [pytest.mark.integration, pytest.mark.slow]

VENV_BIN = Path(sys.executable).parent
QUICKSTART_DATA = Path(__file__).resolve().parents[1] / "examples" / "quickstart" / "data" / "addition_train.jsonl"


class JobCluster:
    """A one-node Ray cluster on the loopback with a job server, all of its files under ``folder``."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.gcs_port, self.dashboard_port, self.client_port = free_port(), free_port(), free_port()
        # the agent's ports too: its default HTTP port (52365) is held by the agent of any other Ray
        # on this machine (this session's own, with ray[default]), and without it no job is taken
        self.agent_ports = {
            "--dashboard-agent-listen-port": free_port(),
            "--dashboard-agent-grpc-port": free_port(),
            "--metrics-export-port": free_port(),
            "--runtime-env-agent-port": free_port(),
        }
        self.url = f"http://127.0.0.1:{self.dashboard_port}"
        # not the settings an in-process Ray of this test session left (RAY_ADDRESS, ...)
        inherited = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
        self.env = {**inherited, "HOME": str(folder), "RAY_TMPDIR": str(folder)}

    def start(self) -> float:
        """``ray start --head`` with the dashboard; the seconds it took."""
        started = time.perf_counter()
        subprocess.run(
            [
                str(VENV_BIN / "ray"),
                "start",
                "--head",
                "--node-ip-address",
                "127.0.0.1",
                "--port",
                str(self.gcs_port),
                "--include-dashboard",
                "true",
                "--dashboard-host",
                "127.0.0.1",
                "--dashboard-port",
                str(self.dashboard_port),
                "--ray-client-server-port",
                str(self.client_port),
                "--temp-dir",
                str(self.folder),
                "--num-cpus",
                "4",
                "--disable-usage-stats",
                *[str(part) for pair in self.agent_ports.items() for part in pair],
            ],
            env=self.env,
            check=True,
            capture_output=True,
            timeout=240,
        )
        return time.perf_counter() - started

    def state(self) -> dict:
        """What is alive on the cluster: actors, placement groups, Ray sessions (one per Ray
        instance started with this folder) and the node ids."""
        from ray.util.state import list_actors, list_nodes, list_placement_groups

        return {
            "actors": [a.class_name for a in list_actors(address=self.url, filters=[("state", "=", "ALIVE")])],
            "placement_groups": len(list_placement_groups(address=self.url, filters=[("state", "!=", "REMOVED")])),
            "sessions": len(list(self.folder.glob("session_2*"))),
            "nodes": sorted(node.node_id for node in list_nodes(address=self.url)),
        }

    def stop(self) -> None:
        """SIGKILL every process of this cluster (those naming its folder or its GCS port, and
        all they started); never ``ray stop``, which would stop every Ray on the machine."""
        roots = set(processes_running(str(self.folder))) | set(processes_running(f"127.0.0.1:{self.gcs_port}"))
        for pid in roots | {child for root in roots for child in descendants(root)}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def job_cluster():
    folder = Path(tempfile.mkdtemp(prefix="rj", dir="/tmp"))  # short: Ray's socket paths must stay under 108 bytes
    cluster = JobCluster(folder)
    try:
        cluster.start_seconds = cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_run_submitted_as_a_ray_job_attaches_trains_and_leaves_the_cluster_as_it_was(
    job_cluster, tiny_model_dir, tmp_path
):
    print(f"ray start --head with the dashboard: {job_cluster.start_seconds:.1f} s")
    run_dir = tmp_path / "run"
    config = tmp_path / "grpo.yaml"
    config.write_text(f"""
prompt_data: {QUICKSTART_DATA}
hf_checkpoint: {tiny_model_dir}
rollout_engine: cpu
rm_type: exact_match
use_dynamic_batch_size: true
max_tokens_per_gpu: 2048
num_rollout: 2
rollout_batch_size: 4
n_samples_per_prompt: 4
rollout_max_response_len: 8
output_dir: {run_dir}
""")
    before = job_cluster.state()
    submission, submitted = _submit(job_cluster, str(VENV_BIN / "slime"), "run", str(config))
    assert submitted.returncode == 0 and f"Job '{submission}' succeeded" in submitted.stdout, (
        submitted.stdout + submitted.stderr
    )[-3000:]

    records = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["rollout_id"] >= 0]
    assert [r["rollout_id"] for r in records] == [0, 1] and records[-1]["weight_version"] == 2  # trained twice
    assert all(r["rollout/samples"] == 16 and "train/loss" in r for r in records)
    placed = json.loads((run_dir / "placement.json").read_text())["parts"]
    assert {placed[part]["node_id"] for part in ("driver", "train_rank_0", "engine_0")} == set(before["nodes"])

    after = _settled(job_cluster, before)
    assert after == before, after  # no actor or placement group left, and no second Ray session
    assert before == {"actors": [], "placement_groups": 0, "sessions": 1, "nodes": before["nodes"]}


def _submit(
    cluster: JobCluster, *entrypoint: str, agent_wait_s: float = 120
) -> tuple[str, subprocess.CompletedProcess]:
    """``ray job submit --address URL -- ENTRYPOINT``; its submission id and result. The head
    refuses jobs until its node's dashboard agent has registered ("No available agent to submit
    job, please try again later"), which on a loaded machine can come well after ``ray start``
    returns: that answer is tried again, with a new submission id, until ``agent_wait_s``."""
    deadline = time.monotonic() + agent_wait_s
    while True:
        submission = f"slime-{uuid.uuid4().hex[:8]}"
        result = subprocess.run(
            [
                str(VENV_BIN / "ray"),
                "job",
                "submit",
                "--address",
                cluster.url,
                "--submission-id",
                submission,
                "--",
                *entrypoint,
            ],
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=500,
        )
        if "No available agent to submit job" not in result.stdout + result.stderr or time.monotonic() > deadline:
            return submission, result
        time.sleep(2)


def _settled(cluster: JobCluster, want: dict, timeout_s: float = 30) -> dict:
    """The cluster's state once it equals ``want`` (the job's supervisor actor exits shortly
    after the job), or as it is at the deadline."""
    deadline = time.monotonic() + timeout_s
    while (state := cluster.state()) != want and time.monotonic() < deadline:
        time.sleep(0.5)
    return state
