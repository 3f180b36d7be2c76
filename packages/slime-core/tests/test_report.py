"""`slime report` on a real run directory (a short `slime run` on the tiny model), on a run
that is still writing its metrics, and on folders that are not runs."""

import json
import shutil

import pytest
from PIL import Image

from slime_core.cli.main import main
from slime_core.cli.run import run_command
from slime_core.loop.run_dir import read_metrics
from slime_core.plugins import Plugins
from slime_core.tools.report import PIXELS, latest_attempt, write_report

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def real_run(ray_cluster, tiny_model_dir, tmp_path_factory):
    """A finished run: 2 rollouts of GRPO on addition with the CPU engine and FSDP, evaluated
    before training and after the last rollout, with TensorBoard on."""
    root = tmp_path_factory.mktemp("report-run")
    prompts = [json.dumps({"prompt": f"{a}+{b}=", "label": str(a + b)}) + "\n" for a in range(10) for b in range(10)]
    (root / "train.jsonl").write_text("".join(prompts))
    (root / "eval.jsonl").write_text("".join(prompts[:4]))
    argv = [
        "--prompt-data",
        str(root / "train.jsonl"),
        "--eval-prompt-data",
        "addition",
        str(root / "eval.jsonl"),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--rollout-engine",
        "cpu",
        "--rm-type",
        "exact_match",
        "--rollout-batch-size",
        "4",
        "--n-samples-per-prompt",
        "4",
        "--rollout-max-response-len",
        "4",
        "--num-rollout",
        "2",
        "--eval-interval",
        "2",
        "--lr",
        "1e-3",
        "--output-dir",
        str(root / "run"),
        "--use-tensorboard",
    ]
    assert run_command(argv, Plugins()) == 0
    return root / "run"


def test_report_of_a_finished_run_has_every_plot_and_the_eval_numbers(real_run, tmp_path):
    report = write_report(real_run, tmp_path / "report")
    for name in ("reward", "eval", "kl", "response_length", "step_time"):
        with Image.open(tmp_path / "report" / f"{name}.png") as image:
            assert (image.format, image.size) == ("PNG", PIXELS), name
            image.verify()
    text = report.read_text()
    evals = [
        (r["rollout_id"], r["eval/addition/reward_mean"])
        for r in read_metrics(real_run / "metrics.jsonl")
        if "eval/addition/reward_mean" in r
    ]
    assert [rollout_id for rollout_id, _ in evals] == [-1, 1]
    [row] = [line for line in text.splitlines() if line.startswith("| `eval/addition/reward_mean`")]
    assert f"{evals[0][1]:.4g} (rollout -1)" in row and f"{evals[-1][1]:.4g} (rollout 1)" in row
    assert "- rollouts logged: 2 of 2" in text and "![step_time](step_time.png)" in text
    assert "| train |" in text and "| rollout |" in text and "| weight_update |" in text


def test_a_real_run_sends_its_metrics_to_tensorboard(real_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(real_run / "tensorboard"))
    events.Reload()
    records = read_metrics(real_run / "metrics.jsonl")
    assert [e.step for e in events.Scalars("eval/addition/reward_mean")] == [-1, 1]
    assert [e.value for e in events.Scalars("train/grad_norm")] == pytest.approx(
        [r["train/grad_norm"] for r in records[1:]]
    )


def test_report_of_a_running_run_skips_the_half_written_line(real_run, tmp_path, capsys):
    running = tmp_path / "running"
    shutil.copytree(real_run, running, ignore=shutil.ignore_patterns("report"))
    (running / "status.json").write_text(json.dumps({"status": "running", "time": 0}) + "\n")
    lines = (running / "metrics.jsonl").read_text().splitlines(keepends=True)
    (running / "metrics.jsonl").write_text("".join(lines[:-1]) + lines[-1][:40])  # rollout 1 being written
    assert main(["report", str(running)]) == 0
    text = (running / "report" / "report.md").read_text()
    assert "- status: **running**" in text and "- rollouts logged: 1 of 2" in text
    assert "(rollout -1)" in text and "(rollout 1)" not in text
    assert "report.md" in capsys.readouterr().out


def test_report_skips_the_metric_families_a_run_did_not_log(tmp_path):
    records = [
        {
            "rollout_id": i,
            "time": 100.0 + i,
            "rollout/reward_mean": 0.1 * i,
            "time/rollout": 0.5,
            "perf/step_seconds": 0.5,
        }
        for i in range(4)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    text = write_report(tmp_path).read_text()
    assert sorted(p.name for p in (tmp_path / "report").glob("*.png")) == ["reward.png", "step_time.png"]
    assert "## Evaluation" not in text and "rising (+0.3)" in text
    assert "| other | 0.375 |" in text  # 0.5 s of each 1 s between records is in no phase; none before the first


def test_a_resumed_run_reports_its_last_attempt_and_a_restarted_one_only_the_restart():
    def ids(*attempts):
        records = [{"rollout_id": i, "attempt": n} for n, attempt in enumerate(attempts) for i in attempt]
        return [(r["rollout_id"], r["attempt"]) for r in latest_attempt(records)]

    assert ids([-1, 0, 1, 2], [2, 3], [3, 4]) == [(-1, 0), (0, 0), (1, 0), (2, 1), (3, 2), (4, 2)]
    assert ids([-1, 0, 1, 2], [0, 1]) == [(0, 1), (1, 1)]


def test_report_on_a_folder_that_is_not_a_run_says_so(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "has no metrics.jsonl: it is not a slime run directory" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err
