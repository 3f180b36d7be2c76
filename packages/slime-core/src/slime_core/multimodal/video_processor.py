"""The Qwen-VL video processor without torchvision: frames to ``pixel_values_videos`` and
``video_grid_thw`` with PIL and numpy.

transformers' Qwen2-VL (also Qwen2.5-VL's) and Qwen3-VL video processors are torchvision
backends, and PyPI's torchvision wheels are CUDA builds that do not load against a CPU torch.
`FrameVideoProcessor` computes what they compute for a video given as frames (taken as
sampled at `slime_core.multimodal.videos.FRAMES_PER_SECOND`, so no frame is dropped): each
frame resized to the family's ``smart_resize`` size (bicubic, by PIL: a frame already at that
size is unchanged, as by torchvision; a resized one differs from torchvision's by the
interpolation's rounding), rescaled and normalised, the frame count padded to the temporal
patch size with the last frame, and patches laid out as theirs (time, merged rows and
columns, then channel, time, row, column within a patch). It is a transformers
``VideoProcessorMixin``, so the model's processor (chat template, tokenizer) expands each
video's placeholder into its tokens as with theirs, Qwen3-VL's frame timestamps included.
The engine and the trainer both use it, so their forwards see the same pixels.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from transformers.video_processing_utils import VideoProcessorMixin

from slime_core.multimodal.videos import FRAMES_PER_SECOND, VideoError

#: each processor class's video family (its video processor's resize rule and defaults)
PROCESSOR_FAMILIES = {"Qwen2VLProcessor": "qwen2_vl", "Qwen2_5_VLProcessor": "qwen2_vl", "Qwen3VLProcessor": "qwen3_vl"}
#: each family's transformers video processor class (what a saved config names)
VIDEO_PROCESSOR_CLASSES = {"qwen2_vl": "Qwen2VLVideoProcessor", "qwen3_vl": "Qwen3VLVideoProcessor"}
_CLIP_MEAN, _CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
#: transformers' defaults of each family's video processor (Qwen2VLVideoProcessor, Qwen3VLVideoProcessor)
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2_vl": dict(
        patch_size=14, size={"shortest_edge": 128 * 28 * 28, "longest_edge": 28 * 28 * 768},
        image_mean=_CLIP_MEAN, image_std=_CLIP_STD,
    ),
    "qwen3_vl": dict(
        patch_size=16, size={"shortest_edge": 128 * 32 * 32, "longest_edge": 32 * 32 * 768},
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    ),
}  # fmt: skip
_SHARED_DEFAULTS = dict(temporal_patch_size=2, merge_size=2, rescale_factor=1 / 255, resample=3)
#: the settings read from a saved video (or image) processor config
SETTINGS = ("patch_size", "temporal_patch_size", "merge_size", "size", "image_mean", "image_std", "rescale_factor")


class FrameVideoProcessor(VideoProcessorMixin):
    """A Qwen-VL family's video processor over lists of PIL frames (see the module docstring)."""

    model_input_names = ["pixel_values_videos", "video_grid_thw"]

    def __init__(self, family: str, **settings: Any):
        super().__init__()
        self.family = family
        values = {**_SHARED_DEFAULTS, **FAMILY_DEFAULTS[family], **settings}
        self.patch_size, self.temporal_patch_size = values["patch_size"], values["temporal_patch_size"]
        self.merge_size, self.size = values["merge_size"], dict(values["size"])
        self.rescale_factor, self.resample = values["rescale_factor"], values["resample"]
        self.image_mean, self.image_std = values["image_mean"], values["image_std"]

    def __call__(self, videos, return_tensors=None, return_metadata=True, video_metadata=None, do_sample_frames=None):
        """``videos``: a list of videos, each a list of PIL frames of one size (or one such video),
        as sampled at `FRAMES_PER_SECOND` (``video_metadata``, if given, must say so: frames are
        not sampled here); torch tensors (``return_tensors`` None or ``"pt"``), and each video's
        metadata (transformers' processors write Qwen3-VL's timestamps from it)."""
        import torch
        from transformers.image_processing_utils import BatchFeature
        from transformers.video_utils import VideoMetadata

        if videos and not isinstance(videos[0], (list, tuple)):
            videos = [videos]
        fps = {(m.get("fps") if isinstance(m, dict) else m.fps) for m in video_metadata or []}
        if do_sample_frames or return_tensors not in (None, "pt") or fps - {FRAMES_PER_SECOND}:
            raise ValueError(
                f"the video processor built without torchvision takes frames as sampled at {FRAMES_PER_SECOND:g} per "
                f"second and returns torch tensors (asked: do_sample_frames={do_sample_frames}, fps {sorted(fps)}, "
                f"return_tensors={return_tensors!r}); sample the frames where the data is made"
            )
        patches, grids, metadata = [], [], []
        for frames in videos:
            video_patches, grid = self.patchify(frames)
            patches.append(video_patches)
            grids.append(grid)
            count, (width, height) = len(frames), frames[0].size
            metadata.append(
                VideoMetadata(
                    total_num_frames=count, fps=FRAMES_PER_SECOND, width=width, height=height,
                    duration=count / FRAMES_PER_SECOND, frames_indices=list(range(count)),
                )
            )  # fmt: skip
        data = {
            "pixel_values_videos": torch.from_numpy(np.concatenate(patches)),
            "video_grid_thw": torch.tensor(grids, dtype=torch.long),
        }
        if return_metadata:
            data["video_metadata"] = metadata
        return BatchFeature(data)

    def patchify(self, frames: list) -> tuple[np.ndarray, list[int]]:
        """One video's (T' * H' * W', C * t * p * p) float32 patches and its (T', H', W') grid."""
        from PIL import Image

        height, width = self.target_size(len(frames), frames[0].height, frames[0].width)
        pixels = np.stack(
            [np.asarray(f.resize((width, height), resample=Image.Resampling(self.resample))) for f in frames]
        ).astype(np.float32)  # (T, H, W, C)
        mean = np.asarray(self.image_mean, np.float32) / self.rescale_factor
        std = np.asarray(self.image_std, np.float32) / self.rescale_factor
        pixels = ((pixels - mean) / std).transpose(0, 3, 1, 2)  # (T, C, H, W)
        if pad := -len(frames) % self.temporal_patch_size:
            pixels = np.concatenate([pixels, np.repeat(pixels[-1:], pad, axis=0)])
        t, p, m = self.temporal_patch_size, self.patch_size, self.merge_size
        grid = [pixels.shape[0] // t, height // p, width // p]
        channels = pixels.shape[1]
        shaped = pixels.reshape(grid[0], t, channels, grid[1] // m, m, p, grid[2] // m, m, p)
        flat = shaped.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(grid[0] * grid[1] * grid[2], channels * t * p * p)
        return np.ascontiguousarray(flat), grid

    def saved_settings(self) -> dict[str, Any]:
        """The settings as transformers saves its video processor (naming its own class)."""
        settings = {key: getattr(self, key) for key in (*SETTINGS, "resample")}
        return {**settings, "video_processor_type": VIDEO_PROCESSOR_CLASSES[self.family]}

    def target_size(self, frames: int, height: int, width: int) -> tuple[int, int]:
        """The (height, width) the family's video processor resizes ``frames`` frames to."""
        factor = self.patch_size * self.merge_size
        bounds = dict(min_pixels=self.size["shortest_edge"], max_pixels=self.size["longest_edge"])
        try:
            if self.family == "qwen3_vl":
                from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize as resize3

                return resize3(frames, height, width, temporal_factor=self.temporal_patch_size, factor=factor, **bounds)
            from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

            return smart_resize(height, width, factor=factor, **bounds)
        except ValueError as exc:
            raise VideoError(f"a video of {frames} frame(s) of {width}x{height} cannot be processed: {exc}") from None


def frame_video_processor(path: Path, processor_class: str) -> FrameVideoProcessor | None:
    """The video processor of the model directory ``path`` whose processor is ``processor_class``,
    with the settings of its saved video processor (or, as transformers falls back to, its image
    processor's); None for a processor family that takes no videos here."""
    family = PROCESSOR_FAMILIES.get(processor_class)
    if family is None:
        return None
    saved = _saved_settings(path)
    settings = {key: saved[key] for key in SETTINGS if key in saved}
    size = dict(settings.get("size") or FAMILY_DEFAULTS[family]["size"])
    for key, edge in (("min_pixels", "shortest_edge"), ("max_pixels", "longest_edge")):
        if saved.get(key) is not None:  # the older spelling, which transformers also reads
            size[edge] = saved[key]
    return FrameVideoProcessor(family, **{**settings, "size": size})


def _saved_settings(path: Path) -> dict[str, Any]:
    """The saved video processor settings: processor_config.json's ``video_processor``,
    video_preprocessor_config.json, else the image processor's (processor_config.json's
    ``image_processor``, preprocessor_config.json)."""
    processor = path / "processor_config.json"
    embedded = json.loads(processor.read_text()) if processor.is_file() else {}
    if "video_processor" in embedded:
        return embedded["video_processor"]
    for name in ("video_preprocessor_config.json", "preprocessor_config.json"):
        if (path / name).is_file():
            return json.loads((path / name).read_text())
    return embedded.get("image_processor", {})


def save_video_processor(save_dir: Path, settings: dict[str, Any]) -> None:
    """Add a video processor's ``settings`` (naming its transformers class) to ``save_dir``'s
    processor_config.json, where transformers saves a processor's video processor."""
    file = save_dir / "processor_config.json"
    config = json.loads(file.read_text())
    config["video_processor"] = settings
    file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
