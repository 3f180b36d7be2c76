"""Images as data records and SGLang's ``image_data`` hold them: a path, a ``file://`` URL, a
``data:image/...;base64,`` URL, bare base64, a Parquet image cell (``{"bytes": ..., "path": ...}``,
as Hugging Face datasets write them) or a PIL image; and back to the data URL SGLang takes."""

from __future__ import annotations

import base64
import binascii
import io
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse


class ImageError(ValueError):
    """An image reference that does not give an image; the message says which and why."""


def load_image(ref: Any):
    """The RGB PIL image ``ref`` gives (see the module docstring), fully read into memory."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(ref, Image.Image):
        return ref if ref.mode == "RGB" else ref.convert("RGB")
    source = _image_source(ref)
    try:
        with Image.open(source) as image:
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError) as exc:
        name = f"image file '{source}'" if isinstance(source, Path) else _describe(ref)
        raise ImageError(f"{name} is not an image PIL can decode ({exc}); replace or drop it") from None


def _image_source(ref: Any) -> Path | io.BytesIO:
    """A file path or the bytes of the image ``ref`` names."""
    if isinstance(ref, dict) and ref.get("bytes"):
        return io.BytesIO(ref["bytes"])
    if isinstance(ref, dict) and ref.get("path"):
        ref = ref["path"]
    if isinstance(ref, bytes):
        return io.BytesIO(ref)
    if not isinstance(ref, str):
        raise ImageError(f"an image must be a path, a file:// or data: URL, or base64 text, got {type(ref).__name__}")
    if ref.startswith("data:"):
        return io.BytesIO(_b64decode(ref.partition(",")[2], ref))
    if ref.startswith(("http://", "https://")):
        raise ImageError(f"{_describe(ref)}: images are not downloaded; save it and give its path or file:// URL")
    path = Path(unquote(urlparse(ref).path)) if ref.startswith("file://") else Path(ref)
    if _looks_like_path(ref) or path.exists():
        if not path.is_file():
            raise ImageError(f"image file '{path}' does not exist (relative paths are from the working directory)")
        return path
    return io.BytesIO(_b64decode(ref, ref))


def _looks_like_path(ref: str) -> bool:
    return ref.startswith(("file://", "/", "./", "../", "~")) or Path(ref).suffix.lower() in _SUFFIXES


_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff"}


def _b64decode(text: str, ref: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError(f"{_describe(ref)} is neither an existing file nor valid base64") from None


def _describe(ref: Any) -> str:
    text = str(ref)
    return f"image '{text[:60]}...'" if len(text) > 60 else f"image '{text}'"


def encode_image(ref: Any) -> str:
    """The image ``ref`` gives as a ``data:image/png;base64,...`` URL (what SGLang's ``image_data``
    takes); a data URL is returned as it is."""
    if isinstance(ref, str) and ref.startswith("data:image/"):
        return ref
    png = io.BytesIO()
    load_image(ref).save(png, format="PNG")
    return "data:image/png;base64," + base64.b64encode(png.getvalue()).decode("ascii")


def image_data(sample) -> dict[str, list[str]]:
    """The engine's keyword arguments for ``sample``'s images: ``{"image_data": [data URL, ...]}``
    (SGLang's field), or none for a text-only prompt."""
    images = (sample.multimodal_inputs or {}).get("images")
    return {"image_data": [encode_image(image) for image in images]} if images else {}
