"""The SFT quickstart with ``--actor-runtime inprocess`` (one train rank in the driver, no Ray),
as a user runs it: a fresh ``slime run`` process. It failed 3 runs of 3 with ``ImportError:
cannot import name 'AutoModelForCausalLM' from 'transformers'``: the train rank's start-up
thread and the tokenizer's thread imported transformers' lazy module at once. Two steps of
8 prompts instead of the quickstart's 300 of 64."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
SLIME = str(Path(sys.executable).with_name("slime"))


def test_the_sft_quickstart_runs_in_process(tiny_model_dir, tmp_path):
    command = [
        SLIME,
        "run",
        "examples/quickstart/sft_warmup.yaml",
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--actor-runtime",
        "inprocess",
        "--num-rollout",
        "2",
        "--rollout-batch-size",
        "8",
        "--global-batch-size",
        "8",
        "--save",
        "",
        "--save-hf",
        "",
        "--save-interval",
        "0",
        "--output-dir",
        str(tmp_path / "run"),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "placement: in process (1 training rank, no Ray)" in done.stdout
    assert json.loads((tmp_path / "run" / "status.json").read_text())["status"] == "completed"
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout_id"] for r in records] == [0, 1] and all(r["train/loss"] > 0 for r in records)
