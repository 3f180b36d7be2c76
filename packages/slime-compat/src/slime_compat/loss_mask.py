"""slime's ``MultiTurnLossMaskGenerator``: which tokens of a chat conversation are trained on.

The tokens are the whole conversation as the tokenizer's chat template renders it. An
assistant turn is trained on (loss mask 1) from the end of the header the template writes
before it (the generation prompt, e.g. ``<|im_start|>assistant\\n``) to the end of the turn,
including the end-of-turn text the template adds (e.g. ``<|im_end|>\\n``), as slime's masks
are; system, user and tool turns, and assistant messages with ``"step_loss_mask": 0``, are
not. slime writes one method per model family (``tokenizer_type``); this one reads the spans
off the template itself by rendering the conversation turn by turn, so it works for every
family whose template only appends (rendering more messages leaves the earlier text as it
was), with a fast tokenizer (it maps characters to tokens by their offsets).
"""

from __future__ import annotations

from itertools import groupby

#: slime's tokenizer types; every one is handled by the chat template here.
TOKENIZER_TYPES = ("qwen", "qwen3", "qwen3_5", "distill_qwen")


def get_response_lengths(loss_masks: list[list[int]]) -> list[int]:
    """Response length of each loss mask: from its first 1 to its end (0 for a mask of zeros)."""
    return [len(mask) - mask.index(1) if 1 in mask else 0 for mask in loss_masks]


class MultiTurnLossMaskGenerator:
    """Token ids and loss mask of a conversation (see the module docstring)."""

    def __init__(self, tokenizer, tokenizer_type: str = "qwen"):
        if tokenizer_type not in TOKENIZER_TYPES:
            raise ValueError(f"unsupported tokenizer_type {tokenizer_type!r}; slime's are {', '.join(TOKENIZER_TYPES)}")
        self.tokenizer = tokenizer
        self.tokenizer_type = tokenizer_type

    def get_loss_mask(self, messages: list[dict], tools: list[dict] | None = None) -> tuple[list[int], list[int]]:
        """``(token_ids, loss_mask)`` of the conversation, one mask entry per token."""
        text = self._render(messages, tools, generation_prompt=False)
        spans = [
            self._trained_span(messages, i, tools, text)
            for i, message in enumerate(messages)
            if message["role"] == "assistant" and message.get("step_loss_mask", 1) == 1
        ]
        encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        mask = [
            int(any(start < stop and begin < end for begin, stop in spans))  # the token overlaps a trained span
            for start, end in encoded["offset_mapping"]
        ]
        return list(encoded["input_ids"]), mask

    def get_response_lengths(self, loss_masks: list[list[int]]) -> list[int]:
        return get_response_lengths(loss_masks)

    def get_text_from_loss_mask(self, token_ids: list[int], loss_masks: list[int]) -> list[str]:
        """The decoded runs of trained tokens, in order."""
        runs = groupby(zip(token_ids, loss_masks), key=lambda pair: pair[1])
        return [self.tokenizer.decode([token for token, _ in run]) for trained, run in runs if trained]

    def _trained_span(self, messages: list[dict], i: int, tools, text: str) -> tuple[int, int]:
        """Characters of ``text`` that assistant message ``i`` is trained on: after its header, to its turn's end."""
        header = self._render(messages[:i], tools, generation_prompt=True)
        turn = self._render(messages[: i + 1], tools, generation_prompt=False)
        if not (turn.startswith(header) and text.startswith(turn)):
            raise ValueError(
                f"message {i}: the chat template renders this turn differently once later messages follow "
                "(it rewrites earlier turns, as Qwen3's drops earlier reasoning), so its tokens cannot be "
                "located; build tokens and loss mask turn by turn, or use a template that only appends"
            )
        return len(header), len(turn)

    def _render(self, messages: list[dict], tools, generation_prompt: bool) -> str:
        if not messages:  # before an assistant message that opens the conversation: nothing
            return ""
        return self.tokenizer.apply_chat_template(
            messages, tools=tools or None, tokenize=False, add_generation_prompt=generation_prompt
        )
