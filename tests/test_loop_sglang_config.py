"""`slime run --sglang-config`: slime's YAML deployment of the rollout servers starts each server
group's engines with the group's SGLang options, and the run trains on them."""

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEPLOYMENT = """\
sglang:
  - name: actor
    server_groups:
      - {worker_type: regular, num_gpus: 1, overrides: {max_running_requests: 3}}
      - {worker_type: placeholder, num_gpus: 1}
      - {worker_type: regular, num_gpus: 1, overrides: {max_running_requests: 5}}
"""


def test_each_server_group_s_engines_get_its_overrides_and_the_run_trains(slime_run, tmp_path):
    """Two regular groups with different ``overrides`` and a placeholder between them: two
    engines start (the placeholder's slot holds none), each with its group's
    max_running_requests, and the run trains on their samples."""
    deployment = tmp_path / "sglang.yaml"
    deployment.write_text(DEPLOYMENT)
    records = slime_run(
        "--num-rollout", "1", "--rollout-batch-size", "2", "--n-samples-per-prompt", "2",
        "--sglang-config", str(deployment), "--rollout-num-gpus", "3",
    )  # fmt: skip
    engines = tmp_path / "run" / "engines"
    assert sorted(path.name for path in engines.iterdir()) == ["engine_0.log", "engine_1.log"]
    assert "max_running_requests 3," in (engines / "engine_0.log").read_text()
    assert "max_running_requests 5," in (engines / "engine_1.log").read_text()
    assert "train/loss" in records[0] or any(key.startswith("train/") for key in records[0])
