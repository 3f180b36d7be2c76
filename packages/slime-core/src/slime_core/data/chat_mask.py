"""Which tokens of a chat conversation are trained on: the conversation's tokens and loss mask.

The tokens are the whole conversation as the tokenizer's chat template renders it. An
assistant turn is trained on (loss mask 1) from the end of the header the template writes
before it (the generation prompt, e.g. ``<|im_start|>assistant\\n``) to the end of the turn,
including the end-of-turn text the template adds (e.g. ``<|im_end|>\\n``), as slime's masks
are; system, user and tool turns, and assistant messages with ``"step_loss_mask": 0``, are
not. The spans are read off the template itself by rendering the conversation turn by turn,
so it works for every family whose template only appends (rendering more messages leaves the
earlier text as it was), with a fast tokenizer (it maps characters to tokens by their offsets).
Used by the rollout buffer (`slime_core.rollout.rollout_buffer`) and slime-compat's
``MultiTurnLossMaskGenerator``.
"""

from __future__ import annotations


def conversation_tokens_and_mask(
    tokenizer, messages: list[dict], tools: list[dict] | None = None
) -> tuple[list[int], list[int]]:
    """``(token_ids, loss_mask)`` of the conversation, one mask entry per token."""
    text = _render(tokenizer, messages, tools, generation_prompt=False)
    spans = [
        _trained_span(tokenizer, messages, i, tools, text)
        for i, message in enumerate(messages)
        if message["role"] == "assistant" and message.get("step_loss_mask", 1) == 1
    ]
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [
        int(any(start < stop and begin < end for begin, stop in spans))  # the token overlaps a trained span
        for start, end in encoded["offset_mapping"]
    ]
    return list(encoded["input_ids"]), mask


def response_length(loss_mask: list[int]) -> int:
    """The response of a conversation: from its first trained token to its end (0 for none)."""
    return len(loss_mask) - loss_mask.index(1) if 1 in loss_mask else 0


def _trained_span(tokenizer, messages: list[dict], i: int, tools, text: str) -> tuple[int, int]:
    """Characters of ``text`` that assistant message ``i`` is trained on: after its header, to its turn's end."""
    header = _render(tokenizer, messages[:i], tools, generation_prompt=True)
    turn = _render(tokenizer, messages[: i + 1], tools, generation_prompt=False)
    if not (turn.startswith(header) and text.startswith(turn)):
        raise ValueError(
            f"message {i}: the chat template renders this turn differently once later messages follow "
            "(it rewrites earlier turns, as Qwen3's drops earlier reasoning), so its tokens cannot be "
            "located; build tokens and loss mask turn by turn, or use a template that only appends"
        )
    return len(header), len(turn)


def _render(tokenizer, messages: list[dict], tools, generation_prompt: bool) -> str:
    if not messages:  # before an assistant message that opens the conversation: nothing
        return ""
    return tokenizer.apply_chat_template(
        messages, tools=tools or None, tokenize=False, add_generation_prompt=generation_prompt
    )
