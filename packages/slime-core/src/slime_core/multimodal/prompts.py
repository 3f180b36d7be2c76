"""Prompts with images (``--multimodal-keys``, slime's meaning): a record's images, listed under
the record keys the option names per type (``{"image": "images"}``), take the places of the
``<image>`` placeholders in the prompt's text, in order; the chat template renders each as the
model's vision tokens and the processor expands those into one token per image feature."""

from __future__ import annotations

import json
import re
from typing import Any

from slime_core.multimodal.images import ImageError, load_image

#: The placeholder of each media type in a prompt's text (slime's ``MultimodalTypes``).
PLACEHOLDERS = {"image": "<image>", "video": "<video>", "audio": "<audio>"}
#: The types the processors and the engines here take.
SUPPORTED = ("image",)


def parse_multimodal_keys(value: str | dict | None) -> dict[str, str] | None:
    """``--multimodal-keys`` (a JSON object of media type -> record key) as a dict; ValueError
    saying what is wrong and how to write it."""
    if value is None or isinstance(value, dict):
        keys = value
    else:
        try:
            keys = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f'--multimodal-keys {value!r} is not JSON ({exc.msg}); write e.g. \'{{"image": "images"}}\''
            ) from None
    if keys is None:
        return None
    if not isinstance(keys, dict) or not all(isinstance(v, str) for v in keys.values()):
        raise ValueError('--multimodal-keys must map media types to record keys, e.g. \'{"image": "images"}\'')
    unsupported = sorted(set(keys) - set(SUPPORTED))
    if unsupported:
        raise ValueError(
            f"--multimodal-keys: {', '.join(unsupported)} inputs are not supported (only images are); "
            f"drop {', '.join(unsupported)} from --multimodal-keys"
        )
    return keys


def multimodal_messages(prompt: str | list, record: dict[str, Any], keys: dict[str, str], where: str):
    """``(messages, images)``: the prompt as chat messages whose ``<image>`` placeholders became
    image parts, and the decoded images in that order. `ImageError` naming ``where`` when a
    record key is missing, the counts differ, or an image does not load."""
    pending = {kind: list(_media(record, key, kind, where)) for kind, key in keys.items()}
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    images = []
    for message in messages:
        if isinstance(message.get("content"), str):
            message["content"] = _split(message["content"], pending, where)
        for part in message["content"]:
            if isinstance(part, dict) and part.get("type") == "image":
                images.append(_load(part.get("image"), where))
    for kind, left in pending.items():
        if left:
            raise ImageError(
                f"{where}: {len(left)} more {kind}(s) under '{keys[kind]}' than '{PLACEHOLDERS[kind]}' placeholders "
                f"in the prompt; put one {PLACEHOLDERS[kind]} where each {kind} goes"
            )
    return messages, images


def _media(record: dict[str, Any], key: str, kind: str, where: str) -> list:
    if key not in record:
        raise ImageError(f"{where}: no '{key}' key for the {kind}s (--multimodal-keys); keys: {', '.join(record)}")
    value = record[key]
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def _split(text: str, pending: dict[str, list], where: str) -> list[dict[str, Any]]:
    """``text`` as content parts, each placeholder replaced by the next pending item of its type."""
    kinds = {PLACEHOLDERS[kind]: kind for kind in pending}
    parts: list[dict[str, Any]] = []
    for segment in re.split("(" + "|".join(map(re.escape, kinds)) + ")", text) if kinds else [text]:
        if segment in kinds:
            kind = kinds[segment]
            if not pending[kind]:
                raise ImageError(f"{where}: more '{segment}' placeholders in the prompt than {kind}s in the record")
            item = pending[kind].pop(0)
            parts.append(item if isinstance(item, dict) and "type" in item else {"type": kind, kind: item})
        elif segment:
            parts.append({"type": "text", "text": segment})
    return parts


def _load(ref: Any, where: str):
    try:
        return load_image(ref)
    except ImageError as exc:
        raise ImageError(f"{where}: {exc}") from None


def encode_prompt(processor, messages: list[dict], images: list, chat_template_kwargs: dict) -> tuple[str, list[int]]:
    """The prompt's text after the chat template, and its token ids from ``processor`` (each image's
    vision token expanded to as many as the image has features)."""
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **chat_template_kwargs)
    encoded = processor(text=[text], images=images or None, return_tensors="pt")
    return text, encoded["input_ids"][0].tolist()
