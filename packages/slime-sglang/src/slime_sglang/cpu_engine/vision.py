"""Images in prompts, for a vision-language model (Qwen2.5-VL, Qwen3-VL): SGLang's
``image_data`` turned into the vision tower's inputs, and the multimodal rotary positions.

A prompt arrives as token ids in which each image is already expanded to one ``image_token_id``
per image feature (what the model's processor makes, and what slime's rollout sends), with its
images in ``image_data`` (SGLang's ``GenerateReqInput`` format: for one prompt an image or a
list of images, for a batch one such entry per prompt; each a path, a ``file://`` or
``data:image/...;base64,`` URL, or bare base64). The image processor turns them into patches,
and a request whose image tokens do not match its images' features is refused.

The prefill runs the vision tower and places its features at the image tokens; positions are
the model's three-row (time, height, width) positions (``get_rope_index``), under which an
image spans fewer positions than tokens. Each request keeps the difference (``position_offset``),
so its decode steps continue from the right position with plain (one-row) positions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from slime_core.multimodal.vision_inputs import ImagePatches, image_patches, joined, rope_positions
from slime_sglang.cpu_engine.request import BadRequest


@dataclass(frozen=True, eq=False)
class PromptImages:
    """One prompt's images as the vision tower takes them."""

    key: str  # digest of the image data: equal prompts with equal images share a prefill row
    patches: ImagePatches


def is_vision_language(config) -> bool:
    """Whether ``config`` is a vision-language model's (it has a vision tower)."""
    return getattr(config, "vision_config", None) is not None


class ImageInputs:
    """Turns a request's ``image_data`` into `PromptImages` with the served model's image processor."""

    def __init__(self, model_path: str, config):
        from slime_core.multimodal.processor import load_processor

        processor = load_processor(model_path)
        if processor is None:
            raise ValueError(f"{model_path} is a vision-language model without a processor (processor_config.json)")
        self.image_processor = processor.image_processor
        self.image_token_id = config.image_token_id
        self.merge = config.vision_config.spatial_merge_size

    def parse(self, image_data, input_ids: list[int]) -> PromptImages | None:
        """The images of one prompt (``image_data``: one image or a list, or None), checked against
        its image tokens; `BadRequest` for an image that does not load or a count that differs."""
        from slime_core.multimodal.images import ImageError

        refs = [] if image_data is None else image_data if isinstance(image_data, list) else [image_data]
        tokens = input_ids.count(self.image_token_id)
        if not refs:
            if tokens:
                raise BadRequest(f"the prompt has {tokens} image tokens but no image_data; send its images")
            return None
        try:
            patches = image_patches(self.image_processor, refs)
        except ImageError as exc:
            raise BadRequest(f"image_data: {exc}") from None
        features = patches.features(self.merge)
        if features != tokens:
            raise BadRequest(
                f"the prompt has {tokens} image tokens but its {len(refs)} image(s) have {features} features; "
                "build the prompt's ids with the model's processor from the same images"
            )
        return PromptImages(hashlib.sha256("\0".join(map(str, refs)).encode()).hexdigest(), patches)


def prefill_inputs(model, ids: torch.Tensor, mask: torch.Tensor, images: list[PromptImages | None]):
    """The extra forward arguments of a prefill of the (B, L) left-padded prompts ``ids`` whose
    row b holds ``images[b]``: the rows' pixels and grids, and (3, B, L) positions; and (B,)
    each row's position offset."""
    patches = joined([None if image is None else image.patches for image in images])
    positions, offsets = rope_positions(model, ids, mask, mask, patches)
    inputs = {"position_ids": positions}
    if patches is not None:
        inputs.update(pixel_values=patches.pixel_values, image_grid_thw=patches.grid_thw)
    return inputs, offsets
