"""A vision-language model's inputs for a prompt's images, as both the engine and the trainer
compute them (so their forwards agree): the image processor's patches and grids, and the
model's three-row (time, height, width) rotary positions, under which an image spans fewer
positions than it has tokens.

The policy never emits an image or video placeholder token (`without_placeholders`): the model
would take such a token in its own response for a picture, whose features it does not have.
The engine samples without them and the trainer scores without them, so their log-probs agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, eq=False)
class ImagePatches:
    """Some images as a vision tower takes them."""

    pixel_values: Any  # (P, D) torch tensor: the images' patches, image after image
    grid_thw: Any  # (I, 3) torch tensor: each image's patch grid (time, height, width)

    def features(self, merge: int) -> int:
        """How many image tokens the images fill (patches merged ``merge`` x ``merge``)."""
        return int((self.grid_thw.prod(-1) // merge**2).sum())


def image_patches(image_processor, images: list) -> ImagePatches:
    """``images`` (anything `slime_core.multimodal.images.load_image` takes) through the
    model's image processor; raises `ImageError` for one that does not load."""
    from slime_core.multimodal.images import load_image

    out = image_processor(images=[load_image(image) for image in images], return_tensors="pt")
    return ImagePatches(out["pixel_values"], out["image_grid_thw"])


def joined(patches: list[ImagePatches | None]) -> ImagePatches | None:
    """The patches of several prompts, in order, as one (None when none has images)."""
    import torch

    given = [p for p in patches if p is not None]
    if not given:
        return None
    return ImagePatches(torch.cat([p.pixel_values for p in given]), torch.cat([p.grid_thw for p in given]))


def rope_positions(model, ids, mask, prompt_mask, patches: ImagePatches | None):
    """((3, B, L) positions, (B,) offsets) of the (B, L) ``ids`` (``mask``: 1 at real tokens):
    the model's multimodal positions, where the image tokens of the prompt (``prompt_mask``: 1
    on prompt positions) are images; an offset is a row's last position + 1 minus its length."""
    types = ((ids == model.config.image_token_id) & prompt_mask.bool()).int()
    grid = None if patches is None else patches.grid_thw
    positions, offsets = model.model.get_rope_index(
        ids, mm_token_type_ids=types, image_grid_thw=grid, attention_mask=mask
    )
    return positions, offsets.view(-1)


def without_placeholders(logits, config):
    """``logits`` (..., V) with the image and video placeholder tokens of ``config`` (a
    vision-language model's) at -inf: a new tensor, the policy's logits over what it may emit."""
    import torch

    ids = torch.tensor([config.image_token_id, config.video_token_id], device=logits.device)
    return logits.index_fill(-1, ids, float("-inf"))
