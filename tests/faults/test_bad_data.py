"""An over-long prompt in the middle of the data.

Without ``--rollout-max-prompt-len`` the run refuses it before anything starts (exit 2,
file:line, no Ray, no run directory), on the route a user's run takes (the ``slime`` command);
before, Ray, the train rank and the engine started, and the engine refused the prompt's request
mid-rollout (HTTP 400), which ended the run. With ``--rollout-max-prompt-len`` (slime's way to ask
for filtering) it is dropped when the data is loaded, counted with its file:line, and the run
trains on the other prompts: the driver does that alone, so that run is ``slime run``'s command on
the test kit's fake backends (`slime_core.testing.run_on_fakes`), in this process without Ray."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from slime_core.testing import run_on_fakes

pytestmark = pytest.mark.integration

SLIME = str(Path(sys.executable).with_name("slime"))
#: the long prompt is line 3: 200 characters, 200 tokens of the character tokenizer, more than
#: the tiny model's 128 positions (the CPU engine takes prompts of up to 127 tokens)
RECORDS = (
    [{"prompt": f"{a}+{a}=", "label": str(2 * a)} for a in range(2)]
    + [{"prompt": "1" * 199 + "=", "label": "1"}]
    + [{"prompt": f"{a}+{a}=", "label": str(2 * a)} for a in range(2, 4)]
)


def flags(data: Path, model: Path, output: Path) -> list[str]:
    return [
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(model),
        "--rollout-engine",
        "cpu",
        "--rm-type",
        "exact_match",
        "--rollout-batch-size",
        "4",
        "--n-samples-per-prompt",
        "2",
        "--rollout-max-response-len",
        "4",
        "--num-rollout",
        "1",
        "--dump-rollouts",
        "--output-dir",
        str(output),
    ]


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in RECORDS))
    return path


def test_an_over_long_prompt_is_refused_before_ray_starts(data, tiny_model_dir, tmp_path):
    ray_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # where a Ray started by the run would write
    start = time.monotonic()
    try:
        done = subprocess.run(
            [SLIME, "run", *flags(data, tiny_model_dir, tmp_path / "run")],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "HOME": str(ray_dir), "RAY_TMPDIR": str(ray_dir)},
        )
        elapsed = time.monotonic() - start
        ray_sessions = list(ray_dir.glob("**/session_*"))
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert done.returncode == 2, done.stderr[-2000:]
    assert (
        f"{data}:3: the prompt has 200 tokens, more than the engine takes with a whole response: 127 = 128 "
        "(max_position_embeddings of --hf-checkpoint) − 0 (--rollout-engine cpu shortens the response to fit) − 1; "
        "shorten it, or drop such prompts when the data is loaded with --rollout-max-prompt-len 127"
    ) in done.stderr
    assert not (tmp_path / "run").exists()  # the run directory is made just before Ray starts
    assert not ray_sessions, "Ray was started"
    assert elapsed < 60, f"took {elapsed:.1f}s"  # the checks import transformers: ~3-6 s on a loaded 2-core machine


def test_with_filtering_asked_for_it_is_dropped_counted_and_the_run_trains(data, tiny_model_dir, tmp_path, caplog):
    output = tmp_path / "run"
    assert run_on_fakes([*flags(data, tiny_model_dir, output), "--rollout-max-prompt-len", "64"]) == 0
    assert (
        f"{data}: dropped 1 of 5 prompts longer than 64 tokens (--rollout-max-prompt-len), the first at {data}:3"
        in caplog.text
    )
    (record,) = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    assert record["rollout/samples"] == 8 and "train/loss" in record  # generated, scored and trained on
    samples = [json.loads(line) for line in (output / "rollouts" / "rollout_000000.jsonl").read_text().splitlines()]
    assert sorted({s["prompt"] for s in samples}) == [
        "0+0=",
        "1+1=",
        "2+2=",
        "3+3=",
    ]  # every other prompt, once a group
    assert all(s["status"] in ("completed", "truncated") and not s["error"] for s in samples)
