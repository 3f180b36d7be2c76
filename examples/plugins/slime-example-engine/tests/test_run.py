"""The example rollout-engine plugin, installed for real and found through its entry point,
runs `slime run` with no SGLang and no router: FSDP trains, its in-process engine generates,
and the trainer's weights reach it through the weight-update contract."""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PLUGIN = Path(__file__).resolve().parents[1]
SLIME = str(Path(sys.executable).with_name("slime"))


@pytest.fixture
def installed(install_plugin):
    return install_plugin(PLUGIN)


def test_the_engine_plugin_is_listed_with_its_backend(installed):
    listed = subprocess.run([SLIME, "plugins"], capture_output=True, text=True, env=installed, timeout=120)
    plugin = {p["name"]: p for p in json.loads(listed.stdout)}["example-engine"]
    assert plugin["distribution"] == "slime-example-engine"
    assert plugin["registers"] == {"rollout_backends": ["hf-inprocess"]}


def test_a_run_generates_on_the_plugin_engine_and_pushes_weights_into_it(installed, tiny_model_dir, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+1=", "label": str(a + 1)}) + "\n" for a in range(20)))
    ray_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit in 108 bytes
    command = [
        SLIME,
        "run",
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--rollout-backend",
        "hf-inprocess",
        "--router",
        "none",
        "--rm-type",
        "exact_match",
        "--rollout-batch-size",
        "2",
        "--n-samples-per-prompt",
        "4",
        "--rollout-max-response-len",
        "4",
        "--num-rollout",
        "2",
        "--check-weight-update-equal",
        "--output-dir",
        str(tmp_path / "run"),
    ]
    try:
        done = subprocess.run(
            command,
            env={**installed, "HOME": ray_dir, "RAY_TMPDIR": ray_dir},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=400,
        )
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout_id"] for r in records] == [0, 1]
    assert all(r["rollout/response_length_mean"] > 0 for r in records)
    # the engine's log-probs equal the trainer's after each push: the weights arrived intact
    assert all(r["weight_update/max_logprob_diff"] < 1e-3 and r["weight_update/bytes"] > 0 for r in records)
    plugins = {p["distribution"] for p in json.loads((tmp_path / "run" / "plugins.json").read_text())}
    assert "slime-example-engine" in plugins
    assert not list((tmp_path / "run").glob("router/*"))  # no router was started
