"""Tiny vision-language models (Qwen2.5-VL, Qwen3-VL, Qwen3.5, Qwen3.5-MoE) for tests, examples and laptops.

Built from transformers' config classes with a character tokenizer that also holds Qwen's
vision tokens, and the family's processor (image processor + tokenizer + chat template), all
written offline into one directory that `slime_core.multimodal.processor.load_processor` and
``AutoModelForImageTextToText.from_pretrained`` load. Images are cut into 4 x 4 pixel patches,
merged 2 x 2 into one token: a 32 x 32 image is 16 image tokens; a video of 32 x 32 frames is
16 video tokens per two frames.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
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
    its processor class, and the rotary, vision and text config fields that keep that checkpoint's
    structure (multimodal rotary sections, window attention, deepstack layers, hybrid linear /
    full attention, experts) at tiny sizes."""

    model_type: str
    released: str
    processor: str  # transformers class name
    mrope_section: tuple[int, int, int]  # the released rotary sections (time, height, width), in rotary pairs
    rope: dict
    vision: dict
    #: text config fields over the tiny defaults, from (hidden size, number of layers)
    text: Callable[[int, int], dict] = field(default=lambda hidden_size, num_layers: {})
    #: transformers loads this model type's tokenizer as its own byte-level BPE class whatever
    #: tokenizer_config.json names (Qwen3_5Tokenizer), so the characters are written byte-level
    byte_level: bool = False


def _qwen3_5_text(linear_value_heads: int, experts: bool) -> Callable[[int, int], dict]:
    """Qwen3.5's text fields at a tiny hidden size: gated delta-net (linear attention) layers with
    full (output-gated, always in transformers) attention every 4th layer and the last (so 2
    layers hold both kinds), heads twice as wide as the other families' with a quarter of each
    rotated, 2 linear key heads and ``linear_value_heads`` value heads (the released 16 key heads
    to 48 or 32 value heads), and with ``experts`` the released MoE: a softmax router picking
    8 of 256 experts of a quarter of the hidden size, plus as wide a gated shared expert (2 of 4 here)."""

    def fields(hidden_size: int, num_layers: int) -> dict:
        interval = min(4, num_layers)
        layer_types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(num_layers)]
        linear = dict(
            head_dim=hidden_size // 2,
            layer_types=layer_types,
            linear_conv_kernel_dim=4,
            linear_key_head_dim=hidden_size // 4,
            linear_value_head_dim=hidden_size // 4,
            linear_num_key_heads=2,
            linear_num_value_heads=linear_value_heads,
        )
        if not experts:
            return linear
        return dict(
            linear,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=hidden_size // 4,
            shared_expert_intermediate_size=hidden_size // 4,
            router_aux_loss_coef=0.001,
        )

    return fields


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
    # Qwen3.5-27B: Qwen3-VL's vision tower without deepstack layers (transformers' Qwen3.5 has
    # none), a hybrid text stack (`_qwen3_5_text`), interleaved rotary sections over a quarter of
    # each head.
    "qwen3_5": TinyVlmShape(
        "qwen3_5",
        "Qwen/Qwen3.5-27B",
        "Qwen3VLProcessor",
        (11, 11, 10),
        dict(rope_theta=10000000.0, mrope_interleaved=True, partial_rotary_factor=0.25),
        dict(num_position_embeddings=64),
        _qwen3_5_text(linear_value_heads=6, experts=False),
        byte_level=True,
    ),
    # Qwen3.5-35B-A3B (slime's geo3k_vlm example): Qwen3.5 with mixture-of-experts MLPs.
    "qwen3_5_moe": TinyVlmShape(
        "qwen3_5_moe",
        "Qwen/Qwen3.5-35B-A3B",
        "Qwen3VLProcessor",
        (11, 11, 10),
        dict(rope_theta=10000000.0, mrope_interleaved=True, partial_rotary_factor=0.25),
        dict(num_position_embeddings=64),
        _qwen3_5_text(linear_value_heads=4, experts=True),
        byte_level=True,
    ),
}


def build_vlm_tokenizer(save_dir: str | Path | None = None, byte_level: bool = False):
    """The character tokenizer (`slime_core.tools.tiny_models.build_char_tokenizer`) plus Qwen's
    four vision tokens (ids 100-103) and `VLM_CHAT_TEMPLATE`; saved to ``save_dir`` if given.
    With ``byte_level`` the same ids over byte-level symbols (space as "Ġ", newline as "Ċ"), as
    a byte-level BPE tokenizer class (Qwen3.5's) reads them."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    characters = [_byte_level(c) for c in CHARACTERS] if byte_level else CHARACTERS
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + characters + VISION_TOKENS)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.decoder = decoders.ByteLevel() if byte_level else decoders.Fuse()
    if byte_level:
        core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.add_special_tokens(SPECIAL_TOKENS + VISION_TOKENS)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS)
    tokenizer.chat_template = VLM_CHAT_TEMPLATE
    if save_dir is not None:
        tokenizer.save_pretrained(str(save_dir))
    return tokenizer


def _byte_level(character: str) -> str:
    """``character``'s symbol in byte-level BPE vocabularies (GPT-2's byte-to-unicode map): printable
    ASCII stands for itself, the control bytes and space below "!" are shifted past 255."""
    return character if "!" <= character <= "~" else chr(256 + ord(character))


def tiny_vlm_config(family: str, hidden_size: int = 64, num_layers: int = 2, max_positions: int = 256):
    """The transformers config of a tiny ``family`` VLM: a text model like the tiny LMs (4 query /
    2 key-value heads, a 3x MLP, untied, with the family's own fields) and a 2-layer vision tower
    of width ``hidden_size / 2``."""
    from transformers import AutoConfig

    shape = TINY_VLM_FAMILIES[family]
    tokenizer = build_vlm_tokenizer(byte_level=shape.byte_level)
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
    ) | shape.text(hidden_size, num_layers)
    pairs = int(text["head_dim"] * shape.rope.get("partial_rotary_factor", 1.0)) // 2
    text["rope_parameters"] = {"rope_type": "default", **shape.rope, "mrope_section": _sections(shape, pairs)}
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
    """The released rotary sections scaled to ``pairs``, the first taking the rest."""
    released = sum(shape.mrope_section)
    height, width = (section * pairs // released for section in shape.mrope_section[1:])
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
        image_processor=images,
        tokenizer=build_vlm_tokenizer(byte_level=TINY_VLM_FAMILIES[family].byte_level),
        chat_template=VLM_CHAT_TEMPLATE,
    )
    if save_dir is not None:
        processor.save_pretrained(str(save_dir))
        settings = images.to_dict()
        video_family = PROCESSOR_FAMILIES[TINY_VLM_FAMILIES[family].processor]
        video = FrameVideoProcessor(video_family, **{key: settings[key] for key in SETTINGS if key in settings})
        save_video_processor(Path(save_dir), video.saved_settings())
    return processor
