"""slime's ``MultiTurnLossMaskGenerator``: which tokens of a chat conversation are trained on,
as `slime_core.data.chat_mask` reads them off the chat template (its docstring says which).
slime writes one method per model family (``tokenizer_type``); the chat template handles every one.
"""

from __future__ import annotations

from itertools import groupby

from slime_core.data.chat_mask import conversation_tokens_and_mask, response_length

#: slime's tokenizer types; every one is handled by the chat template here.
TOKENIZER_TYPES = ("qwen", "qwen3", "qwen3_5", "distill_qwen")


def get_response_lengths(loss_masks: list[list[int]]) -> list[int]:
    """Response length of each loss mask: from its first 1 to its end (0 for a mask of zeros)."""
    return [response_length(mask) for mask in loss_masks]


class MultiTurnLossMaskGenerator:
    """Token ids and loss mask of a conversation (see `slime_core.data.chat_mask`)."""

    def __init__(self, tokenizer, tokenizer_type: str = "qwen"):
        if tokenizer_type not in TOKENIZER_TYPES:
            raise ValueError(f"unsupported tokenizer_type {tokenizer_type!r}; slime's are {', '.join(TOKENIZER_TYPES)}")
        self.tokenizer = tokenizer
        self.tokenizer_type = tokenizer_type

    def get_loss_mask(self, messages: list[dict], tools: list[dict] | None = None) -> tuple[list[int], list[int]]:
        """``(token_ids, loss_mask)`` of the conversation, one mask entry per token."""
        return conversation_tokens_and_mask(self.tokenizer, messages, tools)

    def get_response_lengths(self, loss_masks: list[list[int]]) -> list[int]:
        return get_response_lengths(loss_masks)

    def get_text_from_loss_mask(self, token_ids: list[int], loss_masks: list[int]) -> list[str]:
        """The decoded runs of trained tokens, in order."""
        runs = groupby(zip(token_ids, loss_masks), key=lambda pair: pair[1])
        return [self.tokenizer.decode([token for token, _ in run]) for trained, run in runs if trained]
