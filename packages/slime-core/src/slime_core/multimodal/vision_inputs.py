"""A vision-language model's inputs for a prompt's images and videos, as both the engine and the
trainer compute them (so their forwards agree): the image and video processors' patches and
grids, and the model's three-row (time, height, width) rotary positions, under which an image
or a video spans fewer positions than it has tokens.

The policy never emits an image or video placeholder token (`without_placeholders`): the model
would take such a token in its own response for a picture, whose features it does not have.
The engine samples without them and the trainer scores without them, so their log-probs agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, eq=False)
class VisionPatches:
    """Some prompts' images and videos as a vision tower takes them (each type in prompt order)."""

    pixel_values: Any = None  # (P, D) torch tensor: the images' patches, image after image; None: no image
    grid_thw: Any = None  # (I, 3) torch tensor: each image's patch grid (time, height, width)
    video_values: Any = None  # (P', D): the videos' patches (the model's pixel_values_videos); None: no video
    video_grid_thw: Any = None  # (V, 3): each video's patch grid
    seconds_per_grid: Any = None  # (V,): seconds per temporal patch of each video (Qwen2.5-VL's second_per_grid_ts)

    def features(self, merge: int) -> int:
        """How many image tokens the images fill (patches merged ``merge`` x ``merge``)."""
        return 0 if self.grid_thw is None else int((self.grid_thw.prod(-1) // merge**2).sum())

    def video_features(self, merge: int) -> int:
        """How many video tokens the videos fill."""
        return 0 if self.video_grid_thw is None else int((self.video_grid_thw.prod(-1) // merge**2).sum())

    def model_inputs(self, device=None) -> dict[str, Any]:
        """The model's forward arguments for these pictures (the types present), on ``device``."""
        named = {
            "pixel_values": self.pixel_values,
            "image_grid_thw": self.grid_thw,
            "pixel_values_videos": self.video_values,
            "video_grid_thw": self.video_grid_thw,
        }
        return {name: value.to(device) for name, value in named.items() if value is not None}


def vision_patches(processor, images: list | None, videos: list | None = None) -> VisionPatches | None:
    """``images`` (anything `slime_core.multimodal.images.load_image` takes) and ``videos`` (lists
    of such frames) through the model's image and video processors; None without either. Raises
    `ImageError` for an image or a frame that does not load (`VideoError` for a video refused)."""
    from slime_core.multimodal.images import load_image
    from slime_core.multimodal.videos import FRAMES_PER_SECOND, load_video, processor_video_kwargs

    fields: dict[str, Any] = {}
    if images:
        out = processor.image_processor(images=[load_image(image) for image in images], return_tensors="pt")
        fields.update(pixel_values=out["pixel_values"], grid_thw=out["image_grid_thw"])
    if videos:
        import torch

        frames = [load_video(video) for video in videos]
        out = processor.video_processor(frames, return_tensors="pt", **processor_video_kwargs(frames))
        step = processor.video_processor.temporal_patch_size / FRAMES_PER_SECOND
        fields.update(
            video_values=out["pixel_values_videos"],
            video_grid_thw=out["video_grid_thw"],
            seconds_per_grid=torch.full((len(frames),), step),
        )
    return VisionPatches(**fields) if fields else None


def joined(patches: list[VisionPatches | None]) -> VisionPatches | None:
    """The patches of several prompts, in order, as one (None when none has images or videos)."""
    import torch

    given = [p for p in patches if p is not None]
    if not given:
        return None
    columns = {}
    for name in ("pixel_values", "grid_thw", "video_values", "video_grid_thw", "seconds_per_grid"):
        parts = [getattr(p, name) for p in given if getattr(p, name) is not None]
        columns[name] = torch.cat(parts) if parts else None
    return VisionPatches(**columns)


def rope_positions(model, ids, mask, prompt_mask, patches: VisionPatches | None):
    """((3, B, L) positions, (B,) offsets) of the (B, L) ``ids`` (``mask``: 1 at real tokens):
    the model's multimodal positions, where the image and video tokens of the prompt
    (``prompt_mask``: 1 on prompt positions) are images and videos; an offset is a row's last
    position + 1 minus its length."""
    given = prompt_mask.bool()
    types = ((ids == model.config.image_token_id) & given).int() + 2 * ((ids == model.config.video_token_id) & given)
    grids = {}
    if patches is not None:
        grids = dict(image_grid_thw=patches.grid_thw, video_grid_thw=patches.video_grid_thw)
        if patches.seconds_per_grid is not None:
            grids["second_per_grid_ts"] = patches.seconds_per_grid
    positions, offsets = model.model.get_rope_index(ids, mm_token_type_ids=types.int(), attention_mask=mask, **grids)
    return positions, offsets.view(-1)


def without_placeholders(logits, config):
    """``logits`` (..., V) with the image and video placeholder tokens of ``config`` (a
    vision-language model's) at -inf: a new tensor, the policy's logits over what it may emit."""
    import torch

    ids = torch.tensor([config.image_token_id, config.video_token_id], device=logits.device)
    return logits.index_fill(-1, ids, float("-inf"))
