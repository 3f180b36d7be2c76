"""A vision-language model's processor (image processor + tokenizer + chat template), loaded
once per process and path, offline.

transformers' Qwen-VL processors also build a video processor, which needs torchvision; where
torchvision is not installed (the CPU development environment) the processor is loaded without
it (`images_only`): images work, videos are refused by the data checks.
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
    name = _processor_class_name(Path(path))
    return images_only(getattr(transformers, name)).from_pretrained(path, local_files_only=True)


def _processor_class_name(path: Path) -> str:
    """The processor class that ``path``'s processor_config.json (or preprocessor_config.json) names."""
    for name in ("processor_config.json", "preprocessor_config.json"):
        file = path / name
        if file.is_file() and "processor_class" in (config := json.loads(file.read_text())):
            return config["processor_class"]
    raise ValueError(f"{path}: no processor_class in processor_config.json or preprocessor_config.json")
