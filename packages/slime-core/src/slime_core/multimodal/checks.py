"""The config checks of ``--multimodal-keys`` (the images themselves are checked with the
other records: `slime_core.data.prompt_dataset.check_record`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_core.multimodal.prompts import parse_multimodal_keys

if TYPE_CHECKING:
    from slime_core.config import Config


def multimodal_problems(config: Config) -> list[str]:
    """A ``--multimodal-keys`` that is not a JSON object of supported types, or that is set
    without ``--apply-chat-template`` (the chat template places each image's tokens)."""
    try:
        keys = parse_multimodal_keys(config.get("multimodal_keys"))
    except ValueError as exc:
        return [str(exc)]
    if keys and not config.get("apply_chat_template"):
        return [
            "--multimodal-keys needs --apply-chat-template: the chat template places each image's vision tokens "
            "in the prompt; add --apply-chat-template"
        ]
    return []
