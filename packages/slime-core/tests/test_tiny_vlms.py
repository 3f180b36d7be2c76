"""`slime tiny-model --family qwen2_5_vl / qwen3_vl`: a tiny vision-language model written offline
with its processor, whose prompts hold one image token per 2 x 2 merged 4-pixel patches."""

import json

import pytest

from slime_core.cli.main import main
from slime_core.tools.tiny_vlms import TINY_VLM_FAMILIES


@pytest.mark.parametrize("family", sorted(TINY_VLM_FAMILIES))
def test_the_command_writes_a_vlm_whose_processor_expands_an_image_into_its_tokens(family, tmp_path):
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    from slime_core.multimodal.processor import load_processor

    assert main(["tiny-model", str(tmp_path), "--family", family, "--hidden-size", "64", "--num-layers", "1"]) == 0
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == family and config["text_config"]["hidden_size"] == 64
    assert sum(config["text_config"]["rope_parameters"]["mrope_section"]) == 8  # head_dim 16 / 2
    processor = load_processor(str(tmp_path))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "2+2?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], images=[Image.new("RGB", (32, 32), "red")], return_tensors="pt")
    image_token = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert (inputs["input_ids"] == image_token).sum() == 16  # (32 / 4)^2 patches, merged 2 x 2
    assert inputs["image_grid_thw"].tolist() == [[1, 8, 8]]
    model = AutoModelForImageTextToText.from_pretrained(tmp_path)
    assert model(**inputs).logits.shape == (1, inputs["input_ids"].shape[1], len(processor.tokenizer))
