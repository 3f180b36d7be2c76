"""The multi-turn tool-use example trains end to end through `slime run`: its generate
function inside the default rollout, tool results in the sequence with loss mask 0, GRPO
steps on those samples, and the new weights pushed back to the engine."""

import json
from pathlib import Path

import pytest

from slime_core.cli.run import run_command
from slime_core.loop.run_dir import read_metrics
from slime_core.plugins import Plugins
from slime_core.testing import RolloutSamples

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).parents[1] / "examples" / "tool_use"


@pytest.fixture(scope="module")
def warmed_up(tmp_path_factory):
    import torch

    from examples.tool_use.warmup import warm_up
    from slime_core.tools.tiny_models import build_tiny_qwen3

    records = [json.loads(line) for line in (EXAMPLE / "data" / "multiply_train.jsonl").read_text().splitlines()]
    model_dir = build_tiny_qwen3(tmp_path_factory.mktemp("tool-model"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        warm_up(model_dir, records)
    finally:
        torch.set_num_threads(threads)
    return model_dir


def test_the_calculator_example_trains_through_the_loop(ray_cluster, warmed_up, tmp_path):
    plugins, kept = Plugins(), RolloutSamples()
    plugins.register_object("tool_use_recorder", kept)
    argv = [
        str(EXAMPLE / "calculator.yaml"),
        "--hf-checkpoint",
        str(warmed_up),
        "--num-rollout",
        "2",
        "--rollout-batch-size",
        "4",
        "--n-samples-per-prompt",
        "4",
        "--global-batch-size",
        "16",
        "--use-dynamic-batch-size",
        "--max-tokens-per-gpu",
        "4096",
        "--check-weight-update-equal",
        "--eval-prompt-data",
        "multiply",
        str(EXAMPLE / "data" / "multiply_eval.jsonl"),
        "--output-dir",
        str(tmp_path / "run"),
    ]
    try:
        assert run_command(argv, plugins) == 0
    finally:
        plugins.unregister("tool_use_recorder")
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["rollout_id"] for r in records] == [0, 1]
    assert records[-1]["weight_version"] == 2 and records[-1]["weight_update/max_logprob_diff"] < 1e-3
    assert all(r["rollout/reward_mean"] > 0 for r in records)  # the warmed-up model answers some right
    samples = kept.samples
    with_tools = [s for s in samples if s.metadata.get("tool_calls")]  # the generate function counts them
    assert len(with_tools) >= len(samples) // 2
    for sample in with_tools:  # tool results are context (mask 0) after a model turn (mask 1)
        assert 0 in sample.loss_mask and sample.loss_mask[0] == 1
        if sample.status == "completed":  # ... and the answer after them is the model's again
            assert sample.loss_mask[-1] == 1
