"""Prompts with images (``--multimodal-keys``): images as paths, file:// URLs, base64 and Parquet
image cells become the sample's ``multimodal_inputs`` and prompt tokens with one image token per
image feature; a missing or undecodable image is refused before start-up with file:line. Videos,
as lists of such frames, alike (one video token per feature of each pair of frames)."""

import base64
import io
import json

import pytest

from slime_core.cli.run import run_command
from slime_core.data.prompt_dataset import PromptDataset, PromptFormat
from slime_core.plugins import Plugins
from slime_core.tokenizer import load_tokenizer

IMAGE_TOKEN, VIDEO_TOKEN = 102, 103  # <|image_pad|>, <|video_pad|> of the tiny VLM's tokenizer
KEYS = {"image": "images"}
MEDIA_KEYS = {"image": "images", "video": "videos"}


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


def test_videos_as_lists_of_frames_become_the_samples_videos_and_their_video_tokens(tiny_vlm_dir, images):
    red, blue = images / "red.png", images / "blue.png"
    frame = "data:image/png;base64," + base64.b64encode(png("green")).decode()
    records = [
        {"prompt": "<video>what moves?", "videos": [[str(red), frame, f"file://{red}"]], "images": []},
        {"prompt": "<image> then <video>", "images": [str(blue)], "videos": [[str(blue)] * 2]},
    ]
    fmt = PromptFormat(apply_chat_template=True, multimodal_keys=MEDIA_KEYS, label_key=None)
    samples = PromptDataset(write_jsonl(images / "v.jsonl", records), fmt, load_tokenizer(str(tiny_vlm_dir))).samples
    # 3 frames of 32 x 32: 2 frame pairs (the last frame repeated) of 16 tokens; 2 of 16 x 16: 4
    assert [(s.tokens.count(IMAGE_TOKEN), s.tokens.count(VIDEO_TOKEN)) for s in samples] == [(0, 32), (4, 4)]
    assert samples[0].multimodal_inputs.keys() == {"videos"} and len(samples[0].multimodal_inputs["videos"][0]) == 3
    assert samples[0].multimodal_inputs["videos"][0][1].getpixel((0, 0)) == (0, 128, 0)  # the frames in order
    assert samples[1].multimodal_inputs.keys() == {"images", "videos"}
    saved = samples[0].to_dict()["multimodal_inputs"]["videos"][0]
    assert len(saved) == 3 and all(f.startswith("data:image/png;base64,") for f in saved) and json.dumps(saved)


BAD_VIDEOS = {
    "a video file": ({"prompt": "<video>?", "videos": ["clip.mp4"]}, ":2: video 'clip.mp4' is not a list of frames"),
    "a missing frame": (
        {"prompt": "<video>?", "videos": [["{dir}/red.png", "{dir}/gone.png"]]},
        ":2: image file '{dir}/gone.png' does not exist",
    ),
    "frames of two sizes": (
        {"prompt": "<video>?", "videos": [["{dir}/red.png", "{dir}/blue.png"]]},
        ":2: a video's frames differ in size (16x16, 32x32)",
    ),
}


@pytest.mark.parametrize("kind", list(BAD_VIDEOS))
def test_a_bad_video_is_refused_before_start_up_with_file_and_line(tiny_vlm_dir, images, kind, capsys):
    record, message = BAD_VIDEOS[kind]
    record = json.loads(json.dumps(record).replace("{dir}", str(images)))
    data = write_jsonl(images / "v.jsonl", [{"prompt": "<video>", "videos": [[str(images / "red.png")]]}, record])
    code = run_command(
        ["--prompt-data", data, "--hf-checkpoint", str(tiny_vlm_dir), "--rollout-batch-size", "1", "--label-key", ""]
        + ["--multimodal-keys", '{"video": "videos"}', "--apply-chat-template", "--dry-run"]
        + ["--rollout-engine", "cpu", "--output-dir", str(images / "run")],
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
        (
            ["--multimodal-keys", '{"video": "v"}', "--apply-chat-template", "--rollout-engine", "sglang"],
            "a real SGLang server (--rollout-engine sglang) takes a video file there",
        ),
    ],
)
def test_a_bad_multimodal_keys_option_is_a_config_error(tiny_vlm_dir, images, flags, message, capsys):
    data = write_jsonl(images / "p.jsonl", [{"prompt": "<image>", "images": [str(images / "red.png")]}])
    argv = ["--prompt-data", data, "--hf-checkpoint", str(tiny_vlm_dir), "--rollout-batch-size", "1", "--dry-run"]
    assert run_command(argv + ["--label-key", "", "--output-dir", str(images / "run"), *flags], Plugins()) == 2
    assert message in capsys.readouterr().err
