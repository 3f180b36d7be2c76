"""`slime run` reports a bad configuration (options, data, model and checkpoint paths) at once, with every
error, before any process starts."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

#: `slime run` in a subprocess, as a user starts it
SLIME_RUN = (sys.executable, "-m", "slime_core.cli.main", "run")


@pytest.fixture
def run_slime(tmp_path, tiny_model_dir):
    """``run_slime(*flags)``: `slime run` of the tiny model with ``flags`` and its output directory
    ``tmp_path / "run"``, in a subprocess; the finished process (its exit status and stderr)."""

    def run(*flags):
        command = [*SLIME_RUN, "--hf-checkpoint", str(tiny_model_dir), *flags, "--output-dir", str(tmp_path / "run")]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    return run


def test_model_data_checkpoint_and_loss_mistakes_are_reported_before_anything_starts(tmp_path, run_slime):
    """What a train rank or the data source would hit ~40 s in, as a traceback from a Ray actor,
    is reported at once with the other config errors: a bad prompt line (file:line), a model
    directory without config.json, a --load that does not exist, a dual-clip bound that is not
    > 1, and --kl-coef with an estimator that has no per-token reward to put it in."""
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n{"prompt": "2+2=", "label": "4"}\n{"question": "3+3="}\n')
    (tmp_path / "not-a-model").mkdir()
    done = run_slime(
        "--prompt-data",
        str(data),
        "--ref-load",
        str(tmp_path / "not-a-model"),
        "--load",
        str(tmp_path / "nowhere"),
        "--eps-clip-c",
        "0.5",
        "--kl-coef",
        "0.1",
        "--rollout-engine",
        "cpu",
        "--rm-type",
        "exact_match",
        "--rollout-batch-size",
        "2",
        "--num-rollout",
        "1",
    )
    assert done.returncode == 2, done.stderr
    for expected in (
        f"{data}:3: no 'prompt' key",
        "--ref-load",
        "has no config.json",
        "--load",
        "does not exist",
        "eps_clip_c",
        "--kl-coef 0.1",
        "--advantage-estimator grpo does not use",
    ):
        assert expected in done.stderr, (expected, done.stderr)
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


def test_bad_configs_fail_before_any_process_starts_with_every_error(tmp_path, run_slime):
    done = run_slime(
        "--prompt-data",
        str(tmp_path / "missing.jsonl"),
        "--rollout-batch-size",
        "3",
        "--n-samples-per-prompt",
        "2",
        "--global-batch-size",
        "4",
        "--rm-type",
        "no_such_reward",
        "--train-backend",
        "no_such_backend",
        "--num-rollout",
        "2",
    )
    assert done.returncode == 2
    for expected in ("missing.jsonl", "--global-batch-size 4", "no_such_reward", "no_such_backend"):
        assert expected in done.stderr, done.stderr
    assert not (tmp_path / "run").exists()  # nothing was started or written
