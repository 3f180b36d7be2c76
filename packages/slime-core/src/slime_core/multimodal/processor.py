"""A vision-language model's processor (image processor + tokenizer + chat template), loaded
once per process and path, offline.

transformers' Qwen-VL processors also build a video processor, which needs torchvision; where
torchvision is not installed (the CPU development environment: PyPI's torchvision wheels are
CUDA builds) the processor is loaded with `slime_core.multimodal.video_processor.FrameVideoProcessor`
in its place, which computes the same inputs from videos given as frames.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path


def images_only(processor_class):
    """``processor_class`` (a transformers ``ProcessorMixin``) without its video processor: a
    subclass of the same name whose sub-processors are all but ``video_processor``."""
    kept = [name for name in processor_class.get_attributes() if name != "video_processor"]
    return type(processor_class.__name__, (processor_class,), {"get_attributes": classmethod(lambda cls: kept)})


@functools.cache
def load_processor(path: str):
    """The processor saved in the model directory ``path``, or None when the model has none
    (a text-only model, whose directory holds no ``processor_config.json`` or
    ``preprocessor_config.json``)."""
    import transformers
    from transformers import AutoProcessor, ProcessorMixin

    if not any((Path(path) / name).is_file() for name in ("processor_config.json", "preprocessor_config.json")):
        return None
    if transformers.utils.is_torchvision_available():
        processor = AutoProcessor.from_pretrained(path, local_files_only=True)
        return processor if isinstance(processor, ProcessorMixin) else None
    return _with_frame_videos(Path(path), getattr(transformers, _processor_class_name(Path(path))))


def _with_frame_videos(path: Path, processor_class):
    """``processor_class`` loaded from ``path`` without torchvision: its video processor is a
    `FrameVideoProcessor` (none for a family whose videos it does not process). It is set after
    loading, outside the sub-processors transformers checks and saves (their check looks the
    base class up in a mapping that is a stub without torchvision)."""
    from slime_core.multimodal.video_processor import frame_video_processor

    processor = _saving_videos(images_only(processor_class)).from_pretrained(str(path), local_files_only=True)
    videos = frame_video_processor(path, processor_class.__name__)
    if videos is not None:
        processor.video_processor = videos
    return processor


def _saving_videos(processor_class):
    """``processor_class`` whose ``save_pretrained`` (``--save-hf``) also saves a
    `FrameVideoProcessor`'s settings, as transformers saves its video processor."""

    def save_pretrained(self, save_directory, *args, **kwargs):
        from slime_core.multimodal.video_processor import FrameVideoProcessor, save_video_processor

        saved = processor_class.save_pretrained(self, save_directory, *args, **kwargs)
        if isinstance(getattr(self, "video_processor", None), FrameVideoProcessor):
            save_video_processor(Path(save_directory), self.video_processor.saved_settings())
        return saved

    return type(processor_class.__name__, (processor_class,), {"save_pretrained": save_pretrained})


def _processor_class_name(path: Path) -> str:
    """The processor class that ``path``'s processor_config.json (or preprocessor_config.json) names."""
    for name in ("processor_config.json", "preprocessor_config.json"):
        file = path / name
        if file.is_file() and "processor_class" in (config := json.loads(file.read_text())):
            return config["processor_class"]
    raise ValueError(f"{path}: no processor_class in processor_config.json or preprocessor_config.json")
