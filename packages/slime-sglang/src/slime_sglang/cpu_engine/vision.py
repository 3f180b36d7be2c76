"""Images and videos in prompts, for a vision-language model (Qwen2.5-VL, Qwen3-VL): SGLang's
``image_data`` and ``video_data`` turned into the vision tower's inputs, and the multimodal
rotary positions.

A prompt arrives as token ids in which each image is already expanded to one ``image_token_id``
per image feature (what the model's processor makes, and what slime's rollout sends), with its
images in ``image_data`` (SGLang's ``GenerateReqInput`` format: for one prompt an image or a
list of images, for a batch one such entry per prompt; each a path, a ``file://`` or
``data:image/...;base64,`` URL, or bare base64). Videos arrive the same way in ``video_data``
(SGLang's field), each video a list of its frames: real SGLang takes a video file there, which
the CPU engine does not decode (`slime_core.multimodal.videos`). The image and video processors
turn them into patches, and a request whose image or video tokens do not match its images' or
videos' features is refused.

The prefill runs the vision tower and places its features at the image tokens; positions are
the model's three-row (time, height, width) positions (``get_rope_index``), under which an
image spans fewer positions than tokens. Each request keeps the difference (``position_offset``),
so its decode steps continue from the right position with plain (one-row) positions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from slime_core.multimodal.vision_inputs import VisionPatches, joined, rope_positions, vision_patches
from slime_sglang.cpu_engine.request import BadRequest


@dataclass(frozen=True, eq=False)
class PromptImages:
    """One prompt's images and videos as the vision tower takes them."""

    key: str  # digest of the image and video data: equal prompts with equal pictures share a prefill row
    patches: VisionPatches


def is_vision_language(config) -> bool:
    """Whether ``config`` is a vision-language model's (it has a vision tower)."""
    return getattr(config, "vision_config", None) is not None


class ImageInputs:
    """Turns a request's ``image_data`` and ``video_data`` into `PromptImages` with the served
    model's image and video processors."""

    def __init__(self, model_path: str, config):
        from slime_core.multimodal.processor import load_processor

        processor = load_processor(model_path)
        if processor is None:
            raise ValueError(f"{model_path} is a vision-language model without a processor (processor_config.json)")
        self.processor = processor
        self.image_token_id, self.video_token_id = config.image_token_id, config.video_token_id
        self.merge = config.vision_config.spatial_merge_size

    def parse(self, image_data, input_ids: list[int], video_data=None) -> PromptImages | None:
        """The images and videos of one prompt (``image_data``: one image or a list, or None;
        ``video_data``: a list of videos, each a list of frames, or None), checked against its image
        and video tokens; `BadRequest` for one that does not load or a count that differs."""
        from slime_core.multimodal.images import ImageError

        refs = [] if image_data is None else image_data if isinstance(image_data, list) else [image_data]
        videos = [] if video_data is None else video_data if isinstance(video_data, list) else [video_data]
        tokens = {
            kind: input_ids.count(token)
            for kind, token in (("image", self.image_token_id), ("video", self.video_token_id))
        }
        for kind, given in (("image", refs), ("video", videos)):
            if tokens[kind] and not given:
                raise BadRequest(f"the prompt has {tokens[kind]} {kind} tokens but no {kind}_data; send its {kind}s")
        if videos and getattr(self.processor, "video_processor", None) is None:
            raise BadRequest(
                f"video_data: the served model's processor ({type(self.processor).__name__}) takes no videos"
            )
        try:
            patches = vision_patches(self.processor, refs, videos)
        except ImageError as exc:
            raise BadRequest(f"{'video_data' if videos else 'image_data'}: {exc}") from None
        if patches is None:
            return None
        self._check_features(tokens, patches, len(refs), len(videos))
        return PromptImages(hashlib.sha256(repr((refs, videos)).encode()).hexdigest(), patches)

    def _check_features(self, tokens: dict[str, int], patches: VisionPatches, images: int, videos: int) -> None:
        for kind, count, features in (
            ("image", images, patches.features(self.merge)),
            ("video", videos, patches.video_features(self.merge)),
        ):
            if features != tokens[kind]:
                raise BadRequest(
                    f"the prompt has {tokens[kind]} {kind} tokens but its {count} {kind}(s) have {features} features; "
                    "build the prompt's ids with the model's processor from the same images and videos"
                )


def prefill_inputs(model, ids: torch.Tensor, mask: torch.Tensor, images: list[PromptImages | None]):
    """The extra forward arguments of a prefill of the (B, L) left-padded prompts ``ids`` whose
    row b holds ``images[b]``: the rows' pixels and grids (images and videos), and (3, B, L)
    positions; and (B,) each row's position offset."""
    patches = joined([None if image is None else image.patches for image in images])
    positions, offsets = rope_positions(model, ids, mask, mask, patches)
    inputs = {"position_ids": positions}
    if patches is not None:
        inputs.update(patches.model_inputs())
    return inputs, offsets
