"""slime.utils.processing_utils: loading a model's tokenizer and processor, and images as the
rollout engine takes them.

- ``load_tokenizer(name_or_path, **kwargs)``: transformers' ``AutoTokenizer``.
- ``load_processor(name_or_path, **kwargs)``: the model's processor when it has one (a
  vision-language model): for a local directory `slime_core.multimodal.processor.load_processor`
  (the one the data, the engine and the trainer use; it also loads Qwen-VL processors where
  torchvision is missing), else transformers' ``AutoProcessor``; None for a text-only model,
  whose "processor" is only its tokenizer, and for one whose processor does not load (a warning
  says why). Called without ``return_tensors``, it gives the images' and videos' features as
  torch tensors, as slime's processors do (transformers' fast, torchvision-based image
  processors); where torchvision is missing the processor is transformers' slower one, which would
  give numpy arrays, and slime's geo3k rollout concatenates the features of its turns with
  ``torch.cat``, keeping only tensors.
- ``build_processor_kwargs(multimodal_inputs)``: the keyword arguments for calling a processor:
  the given inputs, with the text's ids as plain lists and the images', videos' and audio's
  features as torch tensors.
- ``encode_image_for_rollout_engine(image)``: a PIL image as the ``image_data`` entry SGLang
  takes, a ``data:image/png;base64,...`` URL of the image in RGB.
"""

from __future__ import annotations

import base64
import functools
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

        local = load_local(str(name_or_path))
        return None if local is None else _with_tensor_features(local)
    try:
        processor = AutoProcessor.from_pretrained(name_or_path, **kwargs)
    except (OSError, ValueError) as exc:
        log.warning("no processor loaded from %s: %s", name_or_path, exc)
        return None
    return processor if isinstance(processor, ProcessorMixin) else None


def _with_tensor_features(processor):
    """``processor`` when transformers' fast image processors serve it (torchvision is installed),
    else a copy whose calls without ``return_tensors`` give the features as torch tensors (the text's
    ids stay lists, as with the fast ones); the processor loaded once for the run is not changed."""
    import copy

    import transformers

    if transformers.utils.is_torchvision_available():
        return processor
    tensors = copy.copy(processor)
    tensors.__class__ = _tensor_features_class(type(processor))
    return tensors


@functools.cache
def _tensor_features_class(processor_class):
    """A subclass of ``processor_class`` whose ``__call__`` asks the image and video processors for
    torch tensors unless the call names ``return_tensors`` itself."""

    def __call__(self, *args, **kwargs):
        if "return_tensors" not in kwargs:
            for key in ("images_kwargs", "videos_kwargs"):
                kwargs[key] = {"return_tensors": "pt", **kwargs.get(key, {})}
        return processor_class.__call__(self, *args, **kwargs)

    return type(processor_class.__name__, (processor_class,), {"__call__": __call__})


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
