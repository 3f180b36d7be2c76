"""Prompts with images and videos (``--multimodal-keys``, slime's meaning): a record's images and
videos, listed under the record keys the option names per type (``{"image": "images", "video":
"videos"}``), take the places of the ``<image>`` and ``<video>`` placeholders in the prompt's
text, in order; the chat template renders each as the model's vision tokens and the processor
expands those into one token per image or video feature. A video is a list of its frames
(`slime_core.multimodal.videos`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from slime_core.multimodal.images import ImageError, load_image
from slime_core.multimodal.videos import load_video, processor_video_kwargs

#: The placeholder of each media type in a prompt's text (slime's ``MultimodalTypes``).
PLACEHOLDERS = {"image": "<image>", "video": "<video>", "audio": "<audio>"}
#: The types the processors and the engines here take.
SUPPORTED = ("image", "video")


@dataclass
class PromptMedia:
    """A prompt's pictures, each type in prompt order: images (PIL), videos (lists of PIL frames)."""

    images: list = field(default_factory=list)
    videos: list = field(default_factory=list)

    def multimodal_inputs(self) -> dict[str, list] | None:
        """As `Sample.multimodal_inputs` holds them (slime's keys ``images`` and ``videos``, the
        types present), or None for a text-only prompt."""
        inputs = {key: items for key, items in (("images", self.images), ("videos", self.videos)) if items}
        return inputs or None


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
            f"--multimodal-keys: {', '.join(unsupported)} inputs are not supported (only images and videos are); "
            f"drop {', '.join(unsupported)} from --multimodal-keys"
        )
    return keys


def multimodal_messages(
    prompt: str | list, record: dict[str, Any], keys: dict[str, str], where: str
) -> tuple[list[dict], PromptMedia]:
    """``(messages, media)``: the prompt as chat messages whose ``<image>`` and ``<video>``
    placeholders became image and video parts, and the decoded images and videos in that order.
    `ImageError` naming ``where`` when a record key is missing, the counts differ, or an image or
    a video's frame does not load."""
    pending = {kind: list(_media(record, key, kind, where)) for kind, key in keys.items()}
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    media = PromptMedia()
    for message in messages:
        if isinstance(message.get("content"), str):
            message["content"] = _split(message["content"], pending, where)
        for part in message["content"]:
            if isinstance(part, dict) and part.get("type") == "image":
                media.images.append(_load(load_image, part.get("image"), where))
            elif isinstance(part, dict) and part.get("type") == "video":
                media.videos.append(_load(load_video, part.get("video"), where))
    for kind, left in pending.items():
        if left:
            raise ImageError(
                f"{where}: {len(left)} more {kind}(s) under '{keys[kind]}' than '{PLACEHOLDERS[kind]}' placeholders "
                f"in the prompt; put one {PLACEHOLDERS[kind]} where each {kind} goes"
            )
    return messages, media


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


def _load(loader, ref: Any, where: str):
    try:
        return loader(ref)
    except ImageError as exc:
        raise ImageError(f"{where}: {exc}") from None


def encode_prompt(
    processor, messages: list[dict], media: PromptMedia, chat_template_kwargs: dict
) -> tuple[str, list[int]]:
    """The prompt's text after the chat template, and its token ids from ``processor`` (each image's
    and video's vision token expanded to as many as it has features)."""
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **chat_template_kwargs)
    videos = {"videos": media.videos, **processor_video_kwargs(media.videos)} if media.videos else {}
    encoded = processor(text=[text], images=media.images or None, return_tensors="pt", **videos)
    return text, encoded["input_ids"][0].tolist()
