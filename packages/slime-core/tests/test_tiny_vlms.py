"""`slime tiny-model --family qwen2_5_vl / qwen3_vl / qwen3_5 / qwen3_5_moe`: a tiny vision-language
model written offline with its processor, whose prompts hold one image token per 2 x 2 merged 4-pixel patches, and one
video token per 2 x 2 merged 4-pixel patches of each pair of frames."""

import json

import pytest

from slime_core.cli.main import main
from slime_core.multimodal.videos import processor_video_kwargs
from slime_core.tools.tiny_vlms import TINY_VLM_FAMILIES

#: Rotary pairs per head: head_dim 16 / 2, and Qwen3.5's head_dim 32 with a quarter rotated / 2.
ROTARY_PAIRS = {"qwen2_5_vl": 8, "qwen3_vl": 8, "qwen3_5": 4, "qwen3_5_moe": 4}


@pytest.mark.parametrize("family", sorted(TINY_VLM_FAMILIES))
def test_the_command_writes_a_vlm_whose_processor_expands_an_image_into_its_tokens(family, tmp_path):
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    from slime_core.multimodal.processor import load_processor

    assert main(["tiny-model", str(tmp_path), "--family", family, "--hidden-size", "64", "--num-layers", "2"]) == 0
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == family and config["text_config"]["hidden_size"] == 64
    assert sum(config["text_config"]["rope_parameters"]["mrope_section"]) == ROTARY_PAIRS[family]
    if family.startswith("qwen3_5"):  # both of Qwen3.5's layer kinds in 2 layers
        assert config["text_config"]["layer_types"] == ["linear_attention", "full_attention"]
    processor = load_processor(str(tmp_path))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "2+2?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], images=[Image.new("RGB", (32, 32), "red")], return_tensors="pt")
    image_token = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert (inputs["input_ids"] == image_token).sum() == 16  # (32 / 4)^2 patches, merged 2 x 2
    assert inputs["image_grid_thw"].tolist() == [[1, 8, 8]]
    model = AutoModelForImageTextToText.from_pretrained(tmp_path)
    assert model(**inputs).logits.shape == (1, inputs["input_ids"].shape[1], len(processor.tokenizer))
    # a video (a list of frames): its tokens, its grid (frames padded to pairs), and a model forward
    frames = [Image.new("RGB", (32, 32), color) for color in ("red", "green", "blue")]
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "moves?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], videos=[frames], return_tensors="pt", **processor_video_kwargs([frames]))
    video_token = processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert (inputs["input_ids"] == video_token).sum() == 32 and inputs["video_grid_thw"].tolist() == [[2, 8, 8]]
    if family != "qwen2_5_vl":  # each frame pair's time (frames at 2 per second), as transformers writes it
        assert "<0.2 seconds>" in processor.tokenizer.decode(inputs["input_ids"][0])
    assert model(**inputs).logits.shape == (1, inputs["input_ids"].shape[1], len(processor.tokenizer))


@pytest.mark.parametrize("family", sorted(TINY_VLM_FAMILIES))
def test_a_video_of_one_repeated_frame_is_that_image_patched_as_transformers_does(family, tmp_path):
    """The video processor built without torchvision lays patches out as transformers' image
    processor does for the same picture (which repeats it over the temporal patch), resized alike."""
    import numpy as np
    import torch
    from PIL import Image

    from slime_core.multimodal.processor import load_processor
    from slime_core.tools.tiny_vlms import build_tiny_processor

    build_tiny_processor(family, tmp_path)
    processor = load_processor(str(tmp_path))
    frame = Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 45, 3), dtype=np.uint8))
    image = processor.image_processor(images=[frame], return_tensors="pt")
    video = processor.video_processor([[frame, frame]])
    assert video["video_grid_thw"].tolist() == image["image_grid_thw"].tolist() == [[1, 8, 12]]  # 32 x 48
    torch.testing.assert_close(video["pixel_values_videos"], image["pixel_values"], atol=1e-5, rtol=0)
