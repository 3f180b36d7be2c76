"""Prompts with images (``--multimodal-keys``): images as paths, file:// URLs, base64 and Parquet
image cells become the sample's ``multimodal_inputs`` and prompt tokens with one image token per
image feature; a missing or undecodable image is refused before start-up with file:line."""

import base64
import io
import json

import pytest

from slime_core.cli.run import run_command
from slime_core.data.prompt_dataset import PromptDataset, PromptFormat
from slime_core.plugins import Plugins
from slime_core.tokenizer import load_tokenizer

IMAGE_TOKEN = 102  # <|image_pad|> of the tiny VLM's tokenizer
KEYS = {"image": "images"}


def png(color, size=32):
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (size, size), color).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def images(tmp_path):
    """Three images on disk: red.png (32 x 32), blue.png (16 x 16), and broken.png (not an image)."""
    (tmp_path / "red.png").write_bytes(png("red"))
    (tmp_path / "blue.png").write_bytes(png("blue", 16))
    (tmp_path / "broken.png").write_bytes(b"not a png")
    return tmp_path


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_each_image_form_becomes_the_samples_images_and_its_image_tokens(tiny_vlm_dir, images):
    import pyarrow as pa
    import pyarrow.parquet as pq

    red, blue = images / "red.png", images / "blue.png"
    records = [
        {"prompt": "<image>how many?", "images": [str(red)], "label": "1"},
        {"prompt": "<image> vs <image>", "images": [f"file://{blue}", str(red)], "label": "2"},
        {"prompt": "<image>?", "images": ["data:image/png;base64," + base64.b64encode(png("red")).decode()]},
        {"prompt": "<image>?", "images": [base64.b64encode(png("blue", 16)).decode()], "label": "4"},
    ]
    records[2]["label"] = "3"
    parquet = images / "prompts.parquet"
    pq.write_table(
        pa.Table.from_pylist([{"prompt": "<image>!", "images": [{"bytes": png("red"), "path": None}]}]), parquet
    )
    fmt = PromptFormat(apply_chat_template=True, multimodal_keys=KEYS, label_key=None)
    tokenizer = load_tokenizer(str(tiny_vlm_dir))
    samples = PromptDataset(write_jsonl(images / "p.jsonl", records), fmt, tokenizer).samples
    samples += PromptDataset(str(parquet), fmt, tokenizer).samples
    # 32 x 32 pixels: 16 tokens; 16 x 16: 4 (4-pixel patches merged 2 x 2)
    assert [s.tokens.count(IMAGE_TOKEN) for s in samples] == [16, 4 + 16, 16, 4, 16]
    assert [[image.size for image in s.multimodal_inputs["images"]] for s in samples] == [
        [(32, 32)],
        [(16, 16), (32, 32)],
        [(32, 32)],
        [(16, 16)],
        [(32, 32)],
    ]
    assert samples[0].prompt.startswith("<|user|><|vision_start|>") and samples[0].prompt.endswith("<|assistant|>")
    assert samples[1].multimodal_inputs["images"][0].getpixel((0, 0)) == (0, 0, 255)  # blue first, as placed
    saved = samples[0].to_dict()["multimodal_inputs"]["images"][0]
    assert saved.startswith("data:image/png;base64,") and json.dumps(saved)


BAD = {
    "missing file": (
        {"prompt": "<image>?", "images": ["{dir}/gone.png"]},
        ":2: image file '{dir}/gone.png' does not exist",
    ),
    "undecodable": (
        {"prompt": "<image>?", "images": ["{dir}/broken.png"]},
        ":2: image file '{dir}/broken.png' is not an image",
    ),
    "more images": (
        {"prompt": "?", "images": ["{dir}/red.png"]},
        ":2: 1 more image(s) under 'images' than '<image>' placeholders in the prompt",
    ),
    "no key": ({"prompt": "<image>?"}, ":2: no 'images' key for the images (--multimodal-keys)"),
}


@pytest.mark.parametrize("kind", list(BAD))
def test_a_bad_image_is_refused_before_start_up_with_file_and_line(tiny_vlm_dir, images, kind, capsys):
    record, message = BAD[kind]
    record = json.loads(json.dumps(record).replace("{dir}", str(images)))
    data = write_jsonl(images / "p.jsonl", [{"prompt": "<image>", "images": [str(images / "red.png")]}, record])
    code = run_command(
        ["--prompt-data", data, "--hf-checkpoint", str(tiny_vlm_dir), "--rollout-batch-size", "1", "--label-key", ""]
        + ["--multimodal-keys", json.dumps(KEYS), "--apply-chat-template", "--dry-run"]
        + ["--output-dir", str(images / "run")],
        Plugins(),
    )
    err = capsys.readouterr().err
    assert code == 2 and data + message.format(dir=images) in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--multimodal-keys", "{image: x}", "--apply-chat-template"], "--multimodal-keys '{image: x}' is not JSON"),
        (["--multimodal-keys", '{"audio": "a"}', "--apply-chat-template"], "audio inputs are not supported"),
        (["--multimodal-keys", '{"image": "images"}'], "--multimodal-keys needs --apply-chat-template"),
    ],
)
def test_a_bad_multimodal_keys_option_is_a_config_error(tiny_vlm_dir, images, flags, message, capsys):
    data = write_jsonl(images / "p.jsonl", [{"prompt": "<image>", "images": [str(images / "red.png")]}])
    argv = ["--prompt-data", data, "--hf-checkpoint", str(tiny_vlm_dir), "--rollout-batch-size", "1", "--dry-run"]
    assert run_command(argv + ["--label-key", "", "--output-dir", str(images / "run"), *flags], Plugins()) == 2
    assert message in capsys.readouterr().err
