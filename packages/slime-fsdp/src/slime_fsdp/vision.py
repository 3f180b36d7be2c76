"""Training a vision-language model (Qwen2.5-VL, Qwen3-VL): each sample's prompt images
(`RolloutBatch.images`) become the micro-batch's ``pixel_values`` and ``image_grid_thw``, in
sample order (the model places image features at the image tokens in that order, so packing
keeps every image with its sample), and the position ids become the model's three-row
multimodal positions, computed per sample as the engine computes them
(`slime_core.multimodal.vision_inputs`), so trainer and engine log-probs agree.

The image tokens of a prompt, and of the tool or environment turns of a response (loss mask 0:
a multi-turn rollout that shows the model another picture), are the sample's images, in order;
a trained response token must not be one (the model would take it for an image of its own):
such a sample is an error naming the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from slime_core.multimodal.vision_inputs import ImagePatches, image_patches, joined, rope_positions


def is_vision_language(path: str) -> bool:
    """Whether the model directory ``path`` holds a vision-language model (a vision_config)."""
    config = Path(path) / "config.json"
    return config.is_file() and json.loads(config.read_text()).get("vision_config") is not None


class VisionInputs:
    """Adds the images of a micro-batch's samples to its model inputs."""

    def __init__(self, path: str, config):
        from slime_core.multimodal.processor import load_processor

        processor = load_processor(path)
        if processor is None:
            raise ValueError(f"--hf-checkpoint {path} is a vision-language model without processor_config.json")
        self.processor = processor  # saved with the model by --save-hf
        self.image_processor = processor.image_processor
        self.image_token_id = config.image_token_id
        self.merge = config.vision_config.spatial_merge_size

    def add(self, micro, model, tokens: list[list[int]], loss_masks: list[list[int]], images: list) -> None:
        """Set ``micro``'s (3, rows, T) positions and its pixels and grids; ``images``: per sample
        of ``micro.spans`` its images (or None)."""
        positions = torch.zeros((3, *micro.input_ids.shape), dtype=torch.long)
        patches = []
        for (row, start, length, _), ids, loss_mask, refs in zip(micro.spans, tokens, loss_masks, images):
            shown = [1] * (length - len(loss_mask)) + [1 - trained for trained in loss_mask]  # not model output
            sample_patches = self._patches(ids, shown, refs)
            sample_positions, _ = rope_positions(
                model, torch.tensor([ids]), torch.ones(1, length), torch.tensor([shown]), sample_patches
            )
            positions[:, row, start : start + length] = sample_positions[:, 0]
            patches.append(sample_patches)
        micro.position_ids = positions.to(micro.input_ids.device)
        given = joined(patches)
        if given is not None:
            micro.extra = {
                "pixel_values": given.pixel_values.to(micro.input_ids.device),
                "image_grid_thw": given.grid_thw.to(micro.input_ids.device),
            }

    def _patches(self, ids: list[int], shown: list[int], refs) -> ImagePatches | None:
        """The sample's patches; ``shown``: 1 on the tokens the model was given (not its output)."""
        image_tokens = [token == self.image_token_id for token in ids]
        if any(is_image and not given for is_image, given in zip(image_tokens, shown)):
            raise ValueError(
                f"a trained response token is the image token (id {self.image_token_id}), which the model would "
                "take for an image; stop generation at it (--rollout-stop-token-ids) or mask such samples out"
            )
        prompt_tokens = sum(image_tokens)
        patches = image_patches(self.image_processor, refs) if refs else None
        features = 0 if patches is None else patches.features(self.merge)
        if features != prompt_tokens:
            raise ValueError(
                f"a sample has {prompt_tokens} image tokens but its {len(refs or [])} image(s) have {features} "
                "features; were its tokens built by this model's processor from the same images?"
            )
        return patches
