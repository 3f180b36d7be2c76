"""Hostile local users against a real run (Ray, a train rank, a CPU engine, sglang-router and the
middleware front): every run has a token, no process's command line and no file of the run
directory holds it, and a control call without it is refused (401) by the engine and by the
router's front, while the run's own calls, which carry it, go through."""

import json
from pathlib import Path

import httpx
import pytest

from slime_core import hookimpl
from slime_core.testing import command_line, files_holding, processes_running

pytestmark = pytest.mark.integration


class Intruder:
    """During rollout 0, with every part of the run up: scans every command line for the run's
    token and calls the control endpoints without it, as another local user could."""

    def __init__(self, run_dir: Path, model_dir: Path):
        self.run_dir, self.model_dir = run_dir, str(model_dir)
        self.token = None
        self.seen: dict = {}

    @hookimpl
    def slime_before_rollout(self, rollout_id, config):
        if rollout_id != 0:
            return
        self.token = config.network.token
        if not self.token:
            return
        self.seen["parts"] = {
            part: len(processes_running(*words))
            for part, words in {
                "engine": ("engine", "serve", self.model_dir),
                "router": ("sglang::router",),
                "front": ("slime_router.front",),
                "train rank": ("ray::RankProcess",),
                "raylet": ("raylet",),
            }.items()
        }
        self.seen["token on command lines"] = [command_line(pid) for pid in processes_running(self.token)]
        (engine_pid,) = processes_running("engine", "serve", self.model_dir)
        argv = command_line(engine_pid).split()
        engine = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"
        front = json.loads((self.run_dir / "placement.json").read_text())["parts"]["router"]["url"]
        self.seen["answers"] = {
            "engine /pause_generation": httpx.post(f"{engine}/pause_generation", json={}).status_code,
            "engine /update_weights_from_disk": httpx.post(
                f"{engine}/update_weights_from_disk", json={"model_path": "/elsewhere"}
            ).status_code,
            "front /workers": httpx.post(f"{front}/workers", json={"url": "http://127.0.0.1:9"}).status_code,
            "front /metrics/summary": httpx.get(f"{front}/metrics/summary").status_code,
        }


def test_no_local_user_gets_at_the_run_s_control_endpoints(slime_run, tiny_model_dir):
    intruder = Intruder(slime_run.tmp_path / "run", tiny_model_dir)
    records = slime_run("--num-rollout", "1", "--router-middleware", "metrics", hooks=[intruder])
    assert intruder.token, "the run has no token"
    assert all(count >= 1 for count in intruder.seen["parts"].values()), intruder.seen["parts"]
    assert intruder.seen["token on command lines"] == []
    assert intruder.seen["answers"] == {
        "engine /pause_generation": 401,
        "engine /update_weights_from_disk": 401,
        "front /workers": 401,
        "front /metrics/summary": 401,
    }
    assert records[-1]["rollout/samples"] == 64  # the run's own calls carried the token
    assert "router/requests" in records[-1]  # the driver read the front's metrics with it
    assert files_holding(slime_run.tmp_path / "run", intruder.token) == []
