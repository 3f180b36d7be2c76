"""Tiny vision-language models (Qwen2.5-VL, Qwen3-VL) for tests, examples and laptops.

Built from transformers' config classes with a character tokenizer that also holds Qwen's
vision tokens, and the family's processor (image processor + tokenizer + chat template), all
written offline into one directory that `slime_core.multimodal.processor.load_processor` and
``AutoModelForImageTextToText.from_pretrained`` load. Images are cut into 4 x 4 pixel patches,
merged 2 x 2 into one token: a 32 x 32 image is 16 image tokens; a video of 32 x 32 frames is
16 video tokens per two frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from slime_core.tools.tiny_models import ASSISTANT, CHARACTERS, EOS, PAD, SPECIAL_TOKENS, USER

VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"
VISION_TOKENS = [VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD]
PATCH_SIZE, MERGE_SIZE = 4, 2

#: The character template, with a message's content either text or a list of parts ({"type":
#: "text", "text": ...} / {"type": "image"}); an image part becomes Qwen's vision tokens.
VLM_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}" + ASSISTANT + "{% elif message['role'] == 'user' %}" + USER + ""
    "{% else %}" + USER + "{{ message['role'] }}: {% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}" + VISION_START + IMAGE_PAD + VISION_END + ""
    "{% elif part['type'] == 'video' %}" + VISION_START + VIDEO_PAD + VISION_END + ""
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{% if message['role'] == 'assistant' %}" + EOS + "{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}"
)


@dataclass(frozen=True)
class TinyVlmShape:
    """A tiny VLM family: its transformers ``model_type``, the released checkpoint it follows,
    its processor class, and the text and vision config fields that keep that checkpoint's
    structure (multimodal rotary sections, window attention, deepstack layers) at tiny sizes."""

    model_type: str
    released: str
    processor: str  # transformers class name
    mrope_section: tuple[int, int, int]  # the released rotary sections (time, height, width) of 64 pairs
    text: dict
    vision: dict


TINY_VLM_FAMILIES: dict[str, TinyVlmShape] = {
    # Qwen2.5-VL-7B: q/k/v biases, window attention in the vision tower with full attention in
    # the fullatt_block_indexes layers, multimodal rotary sections.
    "qwen2_5_vl": TinyVlmShape(
        "qwen2_5_vl",
        "Qwen/Qwen2.5-VL-7B-Instruct",
        "Qwen2_5_VLProcessor",
        (16, 24, 24),
        dict(rope_theta=1000000.0),
        dict(window_size=4 * PATCH_SIZE * MERGE_SIZE, fullatt_block_indexes=[1]),
    ),
    # Qwen3-VL-8B: interleaved multimodal rotary sections, QK norms, learned vision position
    # embeddings, deepstack features from vision layer 0 into the language model.
    "qwen3_vl": TinyVlmShape(
        "qwen3_vl",
        "Qwen/Qwen3-VL-8B-Instruct",
        "Qwen3VLProcessor",
        (24, 20, 20),
        dict(rope_theta=5000000.0, mrope_interleaved=True),
        dict(num_position_embeddings=64, deepstack_visual_indexes=[0]),
    ),
}


def build_vlm_tokenizer(save_dir: str | Path | None = None):
    """The character tokenizer (`slime_core.tools.tiny_models.build_char_tokenizer`) plus Qwen's
    four vision tokens (ids 100-103) and `VLM_CHAT_TEMPLATE`; saved to ``save_dir`` if given."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHARACTERS + VISION_TOKENS)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.decoder = decoders.Fuse()
    core.add_special_tokens(SPECIAL_TOKENS + VISION_TOKENS)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS)
    tokenizer.chat_template = VLM_CHAT_TEMPLATE
    if save_dir is not None:
        tokenizer.save_pretrained(str(save_dir))
    return tokenizer


def tiny_vlm_config(family: str, hidden_size: int = 64, num_layers: int = 2, max_positions: int = 256):
    """The transformers config of a tiny ``family`` VLM: a text model like the tiny LMs (4 query /
    2 key-value heads, a 3x MLP, untied) and a 2-layer vision tower of width ``hidden_size / 2``."""
    from transformers import AutoConfig

    shape = TINY_VLM_FAMILIES[family]
    tokenizer = build_vlm_tokenizer()
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in VISION_TOKENS}
    text = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=3 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-6,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        head_dim=hidden_size // 4,
        rope_parameters={"rope_type": "default", **shape.text, "mrope_section": _sections(shape, hidden_size // 8)},
    )
    vision = dict(
        depth=2,
        hidden_size=hidden_size // 2,
        intermediate_size=hidden_size,
        num_heads=2,
        patch_size=PATCH_SIZE,
        spatial_merge_size=MERGE_SIZE,
        temporal_patch_size=2,
        out_hidden_size=hidden_size,
        **shape.vision,
    )
    return AutoConfig.for_model(
        shape.model_type,
        text_config=text,
        vision_config=vision,
        image_token_id=ids[IMAGE_PAD],
        video_token_id=ids[VIDEO_PAD],
        vision_start_token_id=ids[VISION_START],
        vision_end_token_id=ids[VISION_END],
        tie_word_embeddings=False,
    )


def _sections(shape: TinyVlmShape, pairs: int) -> list[int]:
    """The released rotary sections (of 64 rotary pairs) scaled to ``pairs``, the first taking the rest."""
    height, width = (section * pairs // 64 for section in shape.mrope_section[1:])
    return [pairs - height - width, height, width]


def build_tiny_vlm(
    save_dir: str | Path,
    family: str = "qwen2_5_vl",
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    max_positions: int = 256,
) -> Path:
    """Save a randomly initialised ``family`` VLM, its tokenizer and its processor to ``save_dir``."""
    import torch
    from transformers import AutoModelForImageTextToText

    if family not in TINY_VLM_FAMILIES:
        raise ValueError(f"unknown VLM family {family!r}; tiny VLMs exist for: {', '.join(TINY_VLM_FAMILIES)}")
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(tiny_vlm_config(family, hidden_size, num_layers, max_positions))
    save_dir = Path(save_dir)
    model.save_pretrained(save_dir)
    build_tiny_processor(family, save_dir)
    return save_dir


def build_tiny_processor(family: str, save_dir: str | Path | None = None):
    """The ``family`` processor over `build_vlm_tokenizer` (4-pixel patches, 2 x 2 merges, images
    and video frames scaled to between 16 x 16 and 64 x 64 pixels); saved to ``save_dir`` if
    given, with its video processor's settings (the image processor's, naming transformers' class)."""
    import transformers
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from slime_core.multimodal.processor import images_only
    from slime_core.multimodal.video_processor import (
        PROCESSOR_FAMILIES,
        SETTINGS,
        FrameVideoProcessor,
        save_video_processor,
    )

    images = Qwen2VLImageProcessorPil(
        patch_size=PATCH_SIZE,
        merge_size=MERGE_SIZE,
        temporal_patch_size=2,
        size={"shortest_edge": 16 * 16, "longest_edge": 64 * 64},
    )
    processor_class = images_only(getattr(transformers, TINY_VLM_FAMILIES[family].processor))
    processor = processor_class(
        image_processor=images, tokenizer=build_vlm_tokenizer(), chat_template=VLM_CHAT_TEMPLATE
    )
    if save_dir is not None:
        processor.save_pretrained(str(save_dir))
        settings = images.to_dict()
        video_family = PROCESSOR_FAMILIES[TINY_VLM_FAMILIES[family].processor]
        video = FrameVideoProcessor(video_family, **{key: settings[key] for key in SETTINGS if key in settings})
        save_video_processor(Path(save_dir), video.saved_settings())
    return processor
