"""slime.utils.processing_utils: loading a model's tokenizer and processor, and images as the
rollout engine takes them.

- ``load_tokenizer(name_or_path, **kwargs)``: transformers' ``AutoTokenizer``.
- ``load_processor(name_or_path, **kwargs)``: the model's processor when it has one (a
  vision-language model): for a local directory `slime_core.multimodal.processor.load_processor`
  (the one the data, the engine and the trainer use; it also loads Qwen-VL processors where
  torchvision is missing), else transformers' ``AutoProcessor``; None for a text-only model,
  whose "processor" is only its tokenizer, and for one whose processor does not load (a warning
  says why).
- ``build_processor_kwargs(multimodal_inputs)``: the keyword arguments for calling a processor:
  the given inputs, with the text's ids as plain lists and the images', videos' and audio's
  features as torch tensors.
- ``encode_image_for_rollout_engine(image)``: a PIL image as the ``image_data`` entry SGLang
  takes, a ``data:image/png;base64,...`` URL of the image in RGB.
"""

from __future__ import annotations

import base64
import io
import logging

log = logging.getLogger(__name__)
#: a processor's keyword groups for the modalities it turns into tensors
MODALITY_KWARGS = ("audio_kwargs", "images_kwargs", "videos_kwargs")

__all__ = ["build_processor_kwargs", "encode_image_for_rollout_engine", "load_processor", "load_tokenizer"]


def load_tokenizer(name_or_path: str, **kwargs):
    """The tokenizer of the model at ``name_or_path`` (a directory or a Hub name)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name_or_path, **kwargs)


def load_processor(name_or_path: str, **kwargs):
    """The multimodal processor of the model at ``name_or_path``, or None when it has none."""
    from pathlib import Path

    from transformers import AutoProcessor, ProcessorMixin

    if Path(name_or_path).is_dir():
        from slime_core.multimodal.processor import load_processor as load_local

        return load_local(str(name_or_path))
    try:
        processor = AutoProcessor.from_pretrained(name_or_path, **kwargs)
    except (OSError, ValueError) as exc:
        log.warning("no processor loaded from %s: %s", name_or_path, exc)
        return None
    return processor if isinstance(processor, ProcessorMixin) else None


def build_processor_kwargs(multimodal_inputs: dict | None = None) -> dict:
    """``multimodal_inputs`` (e.g. ``{"images": [...]}``) plus the per-modality return types:
    token ids as lists (no tensors, no multimodal token-type ids), features as ``pt`` tensors."""
    kwargs = dict(multimodal_inputs or {})
    kwargs["text_kwargs"] = {**kwargs.get("text_kwargs", {}), "return_tensors": None, "return_mm_token_type_ids": False}
    for key in MODALITY_KWARGS:
        kwargs[key] = {**kwargs.get(key, {}), "return_tensors": "pt"}
    return kwargs


def encode_image_for_rollout_engine(image) -> str:
    """``image`` (a PIL image) as a PNG data URL, converted to RGB first when it is not."""
    if image.mode != "RGB":
        image = image.convert("RGB")
    png = io.BytesIO()
    image.save(png, format="PNG")
    return "data:image/png;base64," + base64.b64encode(png.getvalue()).decode("ascii")
