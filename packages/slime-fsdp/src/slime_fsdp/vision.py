"""Training a vision-language model (Qwen2.5-VL, Qwen3-VL): each sample's prompt images and
videos (`RolloutBatch.images`, `RolloutBatch.videos`) become the micro-batch's ``pixel_values``
and ``image_grid_thw`` (``pixel_values_videos`` and ``video_grid_thw``), in sample order (the
model places their features at the image and video tokens in that order, so packing keeps every
picture with its sample), and the position ids become the model's three-row multimodal
positions, computed per sample as the engine computes them (`slime_core.multimodal.vision_inputs`),
so trainer and engine log-probs agree.

The image tokens of a prompt, and of the tool or environment turns of a response (loss mask 0:
a multi-turn rollout that shows the model another picture), are the sample's images, in order
(its video tokens its videos); a trained response token must not be one (the model would take
it for a picture of its own): such a sample is an error naming the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from slime_core.multimodal.vision_inputs import VisionPatches, joined, rope_positions, vision_patches


def is_vision_language(path: str) -> bool:
    """Whether the model directory ``path`` holds a vision-language model (a vision_config)."""
    config = Path(path) / "config.json"
    return config.is_file() and json.loads(config.read_text()).get("vision_config") is not None


class VisionInputs:
    """Adds the images and videos of a micro-batch's samples to its model inputs."""

    def __init__(self, path: str, config):
        from slime_core.multimodal.processor import load_processor

        processor = load_processor(path)
        if processor is None:
            raise ValueError(f"--hf-checkpoint {path} is a vision-language model without processor_config.json")
        self.processor = processor  # saved with the model by --save-hf
        self.tokens = {"image": config.image_token_id, "video": config.video_token_id}
        self.merge = config.vision_config.spatial_merge_size

    def add(
        self, micro, model, tokens: list[list[int]], loss_masks: list[list[int]], images: list, videos=None
    ) -> None:
        """Set ``micro``'s (3, rows, T) positions and its pixels and grids; ``images`` (``videos``):
        per sample of ``micro.spans`` its images (videos), or None."""
        positions = torch.zeros((3, *micro.input_ids.shape), dtype=torch.long)
        patches = []
        videos = videos or [None] * len(images)
        for (row, start, length, _), ids, loss_mask, refs, clips in zip(
            micro.spans, tokens, loss_masks, images, videos
        ):
            shown = [1] * (length - len(loss_mask)) + [1 - trained for trained in loss_mask]  # not model output
            sample_patches = self._patches(ids, shown, refs, clips)
            sample_positions, _ = rope_positions(
                model, torch.tensor([ids]), torch.ones(1, length), torch.tensor([shown]), sample_patches
            )
            positions[:, row, start : start + length] = sample_positions[:, 0]
            patches.append(sample_patches)
        micro.position_ids = positions.to(micro.input_ids.device)
        given = joined(patches)
        if given is not None:
            micro.extra = given.model_inputs(micro.input_ids.device)

    def _patches(self, ids: list[int], shown: list[int], refs, clips) -> VisionPatches | None:
        """The sample's patches; ``shown``: 1 on the tokens the model was given (not its output)."""
        counts = {}
        for kind, token in self.tokens.items():
            marks = [t == token for t in ids]
            if any(mark and not given for mark, given in zip(marks, shown)):
                raise ValueError(
                    f"a trained response token is the {kind} token (id {token}), which the model would take for "
                    f"a{'n' if kind == 'image' else ''} {kind}; stop generation at it (--rollout-stop-token-ids) or "
                    "mask such samples out"
                )
            counts[kind] = sum(marks)
        patches = vision_patches(self.processor, refs, clips)
        for kind, given, features in (
            ("image", refs, 0 if patches is None else patches.features(self.merge)),
            ("video", clips, 0 if patches is None else patches.video_features(self.merge)),
        ):
            if features != counts[kind]:
                raise ValueError(
                    f"a sample has {counts[kind]} {kind} tokens but its {len(given or [])} {kind}(s) have {features} "
                    "features; were its tokens built by this model's processor from the same images and videos?"
                )
        return patches
