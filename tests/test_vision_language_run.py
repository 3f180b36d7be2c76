"""A vision-language model trained by ``slime run`` on the route a user's run takes: JSONL records
with image files under ``--multimodal-keys``, the chat template and the model's processor, the CPU
engine behind sglang-router taking SGLang's ``image_data``, GRPO on the FSDP backend, and the
weight push checked with ``--check-weight-update-equal`` after every step."""

import json

import pytest

from slime_core.cli.run import run_command
from slime_core.loop.run_dir import read_metrics
from slime_core.plugins import Plugins
from slime_core.testing import RolloutSamples

pytestmark = pytest.mark.integration


def picture_records(folder) -> str:
    """Four prompts, each a square of a colour (an image file) and the question about it."""
    from PIL import Image

    lines = []
    for i, colour in enumerate(["red", "green", "blue", "white"]):
        Image.new("RGB", (56, 56), colour).save(folder / f"square{i}.png")
        record = {"prompt": "<image>Which colour?", "label": colour, "images": [str(folder / f"square{i}.png")]}
        lines.append(json.dumps(record) + "\n")
    (folder / "squares.jsonl").write_text("".join(lines))
    return str(folder / "squares.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_5_moe"])
def test_grpo_on_a_vlm_through_slime_run_keeps_the_engine_equal_to_the_trainer(
    ray_cluster, tiny_vlm_dir, tmp_path, family
):
    """Qwen2.5-VL, and Qwen3.5-MoE (gated delta-net layers: one padded row per sample)."""
    from slime_core.tools.tiny_vlms import build_tiny_vlm

    if family != "qwen2_5_vl":
        tiny_vlm_dir = build_tiny_vlm(tmp_path / family, family)
    flags = [
        "--prompt-data", picture_records(tmp_path), "--hf-checkpoint", str(tiny_vlm_dir),
        "--input-key", "prompt", "--label-key", "label", "--multimodal-keys", '{"image": "images"}',
        "--apply-chat-template", "--rm-type", "exact_match",
        "--train-backend", "fsdp", "--rollout-engine", "cpu",
        "--num-rollout", "2", "--rollout-batch-size", "2", "--n-samples-per-prompt", "2",
        "--rollout-max-response-len", "6", "--lr", "1e-3",
        "--entropy-coef", "0.01",  # a gradient even when every sample gets the same reward
        "--check-weight-update-equal", "--output-dir", str(tmp_path / "run"),
    ]  # fmt: skip
    plugins, kept = Plugins(), RolloutSamples()
    plugins.register_object("vlm-run-rollouts", kept)
    assert run_command(flags, plugins) == 0
    records = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["rollout_id"] >= 0]
    assert [r["weight_version"] for r in records] == [1, 2]
    assert all(r["train/grad_norm"] > 0 for r in records)  # it trained: the second push carries new weights
    # the engine, given each prompt's picture, scores as the trainer: before the first step and after the push
    assert all(r["train/train_rollout_logprob_abs_diff"] < 1e-3 for r in records)
    assert all(r["weight_update/max_logprob_diff"] < 1e-3 for r in records)
    # every prompt carried its picture: 49 image tokens (a 56 x 56 picture) and the image itself
    image_token = json.loads((tiny_vlm_dir / "config.json").read_text())["image_token_id"]
    assert len(kept.samples) == 8
    for sample in kept.samples:
        assert sample.tokens[: sample.prompt_length].count(image_token) == 49
        assert len(sample.multimodal_inputs["images"]) == 1
