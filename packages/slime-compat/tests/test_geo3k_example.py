"""slime's multi-turn geo3k example (``examples/geo3k_vlm_multi_turn``: ``rollout.py``, ``env_geo3k.py``,
``base_env.py``), copied verbatim from a slime checkout, runs through ``slime run`` with the tiny
Qwen2.5-VL, the CPU engine and FSDP, with the flags of its launch script
(``run_geo3k_vlm_multi_turn.py``) and a custom config like its ``geo3k_vlm_multi_turn_config.yaml``.

The checkout is ``$SLIME_CHECKOUT`` (default ``/tmp/slime-src``, made by
``git -C SLIME_REPO archive HEAD | tar -x -C /tmp/slime-src``); without one the test is skipped: slime's
files are not copied into this repository.

geo3k's environment answers with text only and ends the episode when the model makes no tool call, which
a random tiny model never makes; the environment the custom config names here is geo3k's, subclassed to
show a picture after the first turn and to go on (slime's ``BaseInteractionEnv.format_observation`` puts
an observation's ``multi_modal_data`` images in the next user turn). slime's rollout encodes that turn
with ``qwen_vl_utils.process_vision_info``: qwen-vl-utils imports torchvision, which does not load on
this CPU build of torch, so where it does not import a stand-in of its ``process_vision_info`` is used.
"""

import itertools
import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from slime_core.cli.run import run_command
from slime_core.loop.run_dir import read_metrics
from slime_core.plugins import Plugins
from slime_core.testing import RolloutSamples

EXAMPLE = "examples/geo3k_vlm_multi_turn"
FILES = ("rollout.py", "env_geo3k.py", "base_env.py")

PICTURE_ENV = textwrap.dedent('''
    """geo3k's environment that shows a picture after every turn but the last, and goes on."""
    from PIL import Image

    from examples.geo3k_vlm_multi_turn.env_geo3k import Geo3kEnv


    class PictureGeo3kEnv(Geo3kEnv):
        def step(self, response_text):
            observation, done, info = super().step(response_text)
            if self.turn < self.max_turns:
                picture = Image.new("RGB", (56, 56), "blue")  # qwen-vl-utils keeps 56 x 56 as it is
                return {**observation, "multi_modal_data": {"image": [picture]}}, False, info
            return observation, done, info


    def build_env(sample=None, args=None, **kwargs):
        return PictureGeo3kEnv(ground_truth=sample.label, max_turns=args.max_turns)
''')

#: qwen-vl-utils' ``process_vision_info`` for messages whose image parts hold PIL images: the images in
#: order, in RGB, and no videos (it also resizes each image to multiples of 28 pixels within its bounds,
#: which leaves 56 x 56 as it is)
QWEN_VL_UTILS_STANDIN = textwrap.dedent("""
    def process_vision_info(conversations):
        parts = [part for message in conversations for part in message["content"] if isinstance(part, dict)]
        images = [part["image"].convert("RGB") for part in parts if part.get("type") == "image"]
        return images or None, None
""")


@pytest.fixture
def slime_example(tmp_path, monkeypatch):
    """A folder laid out as slime's repository root with the example's three files copied verbatim, the
    picture environment and the custom config; on ``sys.path`` and ``PYTHONPATH`` as a user puts it."""
    checkout = Path(os.environ.get("SLIME_CHECKOUT", "/tmp/slime-src"))
    if not all((checkout / EXAMPLE / name).is_file() for name in FILES):
        pytest.skip(f"no slime checkout at {checkout} (set SLIME_CHECKOUT to one): slime's geo3k files are not here")
    root = tmp_path / "slime"
    (root / EXAMPLE).mkdir(parents=True)
    for name in FILES:
        shutil.copyfile(checkout / EXAMPLE / name, root / EXAMPLE / name)
    (root / "picture_env.py").write_text(PICTURE_ENV)
    (root / "geo3k_config.yaml").write_text("max_turns: 2\nrollout_interaction_env_path: picture_env\n")
    paths = [str(root)]
    try:
        import qwen_vl_utils  # noqa: F401
    except Exception:  # not installed, or torchvision does not load
        (tmp_path / "standin").mkdir()
        (tmp_path / "standin" / "qwen_vl_utils.py").write_text(QWEN_VL_UTILS_STANDIN)
        paths.append(str(tmp_path / "standin"))
    for path in reversed(paths):
        monkeypatch.syspath_prepend(path)
    for name in [m for m in sys.modules if m.split(".")[0] in ("examples", "picture_env", "qwen_vl_utils")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    return root


def geo3k_records(folder: Path) -> Path:
    """Two geo3k-style records (its launch's keys: ``problem``, ``answer``, ``images``), each a figure."""
    from PIL import Image, ImageDraw

    lines = []
    for i, (side, colour) in enumerate([(3, "red"), (5, "green")]):
        figure = Image.new("RGB", (32, 32), "white")
        ImageDraw.Draw(figure).rectangle([4, 4, 4 + 4 * side, 24], outline=colour)
        figure.save(folder / f"figure{i}.png")
        record = {"problem": "<image>Find x.", "answer": str(side), "images": [str(folder / f"figure{i}.png")]}
        lines.append(json.dumps(record) + "\n")
    (folder / "geo3k.jsonl").write_text("".join(lines))
    return folder / "geo3k.jsonl"


@pytest.mark.slow
@pytest.mark.integration
def test_slimes_geo3k_multi_turn_functions_run_unmodified_with_an_image_in_a_later_turn(
    ray_cluster, tiny_vlm_dir, slime_example, tmp_path
):
    from slime_core.multimodal.images import image_data
    from slime_core.multimodal.processor import load_processor
    from slime_core.multimodal.vision_inputs import vision_patches

    argv = [
        "--prompt-data", str(geo3k_records(tmp_path)), "--hf-checkpoint", str(tiny_vlm_dir),
        # run_geo3k_vlm_multi_turn.py's rollout and GRPO flags
        "--input-key", "problem", "--label-key", "answer", "--multimodal-keys", '{"image": "images"}',
        "--rm-type", "math", "--apply-chat-template",
        "--custom-generate-function-path", "examples.geo3k_vlm_multi_turn.rollout.generate",
        "--custom-config-path", str(slime_example / "geo3k_config.yaml"),
        "--rollout-shuffle", "--rollout-temperature", "1", "--advantage-estimator", "grpo",
        "--eps-clip", "0.2", "--eps-clip-high", "0.28", "--lr-decay-style", "constant",
        # shrunk to the tiny model on a CPU; a stop at most characters keeps each model turn short
        "--rollout-engine", "cpu", "--train-backend", "fsdp", "--num-rollout", "1",
        "--rollout-batch-size", "2", "--n-samples-per-prompt", "2", "--global-batch-size", "4",
        "--rollout-max-response-len", "200", "--rollout-max-context-len", "240", "--lr", "1e-4",
        "--rollout-stop-token-ids", *[str(i) for i in range(4, 100)],
        "--output-dir", str(tmp_path / "run"),
    ]  # fmt: skip
    plugins, rollouts = Plugins(), RolloutSamples()
    plugins.register_object("geo3k-test-rollouts", rollouts)
    assert run_command(argv, plugins) == 0

    processor = load_processor(str(tiny_vlm_dir))
    image_token = processor.image_token_id
    assert len(rollouts.samples) == 4
    for sample in rollouts.samples:
        response = sample.tokens[sample.prompt_length :]
        # the loss mask covers the model's two turns only: between them, the environment's turn
        assert [trained for trained, _ in itertools.groupby(sample.loss_mask)] == [1, 0, 1], sample.describe()
        shown = [token for token, trained in zip(response, sample.loss_mask) if not trained]
        assert image_token not in [token for token, trained in zip(response, sample.loss_mask) if trained]
        # which is a user turn with the picture (49 image tokens) and geo3k's text
        text = processor.tokenizer.decode(shown, skip_special_tokens=False)
        assert text.startswith("<|user|><|vision_start|>") and text.endswith("ending the episode.<|assistant|>")
        assert shown.count(image_token) == 49
        assert len(sample.multimodal_inputs["images"]) == 2
        # what slime's function computed for training is what the trainer computes from the sample's images
        trained = vision_patches(processor, image_data(sample)["image_data"])
        inputs = sample.multimodal_train_inputs
        assert inputs["image_grid_thw"].tolist() == trained.grid_thw.tolist() == [[1, 8, 8], [1, 14, 14]]
        assert (inputs["pixel_values"] - trained.pixel_values).abs().max() < 1e-5

    (record,) = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["rollout_id"] >= 0]
    # the trainer scored every token with both pictures as the engine did
    assert record["train/train_rollout_logprob_abs_diff"] < 1e-3
