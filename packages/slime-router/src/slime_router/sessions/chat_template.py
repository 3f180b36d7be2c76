"""Chat templates, turn by turn, without re-tokenising what a session already holds.

Turn 1 is the template applied to the request's messages (with the generation prompt) and
tokenised. On a later turn the session keeps every token it has (the earlier prompt and the
model's sampled output, exactly as generated) and tokenises only the text the template adds
after them:

1. the end of the model's turn that the model did not generate itself: what the template
   puts after its end-of-turn token (e.g. ``"\\n"`` after ``<|im_end|>``) when the model
   stopped on it, or the end-of-turn token and what follows when it stopped for another
   reason (length, a stop string);
2. the new messages (tool results, a user turn) and the generation prompt: the template
   applied to the whole conversation, minus the template applied to the conversation up to
   and including the model's last reply.

Step 2 needs a template that only appends: rendering more messages must not change the text
of the earlier ones. Most do; one that rewrites history (e.g. Qwen3 dropping the reasoning of
earlier turns once a new user message arrives) is refused with `TemplateError`, because a
token-exact session cannot follow it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class TemplateError(ValueError):
    """The chat template cannot render the messages, or cannot extend a session token-exactly;
    ``status`` is the HTTP status it answers with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class ChatTemplate:
    """A tokenizer's chat template and the model's end-of-turn tokens."""

    def __init__(self, tokenizer, eos_token_ids: set[int]):
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(eos_token_ids)
        texts = [tokenizer.eos_token] + [tokenizer.decode([token]) for token in sorted(self.eos_token_ids)]
        self.end_markers = [text for text in dict.fromkeys(texts) if text]  # the tokenizer's EOS first

    @classmethod
    def load(cls, model_path: str | Path) -> ChatTemplate:
        """The template of the tokenizer in the model directory ``model_path``; the end-of-turn
        ids are the tokenizer's EOS and those of ``generation_config.json``."""
        tokenizer = _load_tokenizer(Path(model_path))
        eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        generation_config = Path(model_path) / "generation_config.json"
        if generation_config.is_file():
            configured = json.loads(generation_config.read_text()).get("eos_token_id")
            eos.update(configured if isinstance(configured, list) else [] if configured is None else [configured])
        return cls(tokenizer, eos)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def first_prompt(self, messages: list[dict], tools: list | None, options: dict) -> list[int]:
        """Token ids of the first turn: the whole conversation and the generation prompt."""
        return self.encode(self.render(messages, tools, options, generation_prompt=True))

    def continuation(
        self, history: list[dict], new: list[dict], last_token: int | None, tools: list | None, options: dict
    ) -> str:
        """The text that follows a session's tokens when ``new`` messages arrive after ``history``
        (which ends with the model's reply, whose last sampled token is ``last_token``)."""
        before_reply = self.render(history[:-1], tools, options, generation_prompt=True)
        with_reply = self.render(history, tools, options, generation_prompt=False)
        whole = self.render(history + new, tools, options, generation_prompt=True)
        if not (with_reply.startswith(before_reply) and whole.startswith(with_reply)):
            raise TemplateError(
                422,
                "the chat template renders the earlier turns differently once the new messages are added, so the "
                "session cannot keep its tokens; use a template that only appends (or a new session per turn)",
            )
        return self._turn_end(with_reply[len(before_reply) :], last_token) + whole[len(with_reply) :]

    def _turn_end(self, reply_text: str, last_token: int | None) -> str:
        """What the template puts after the model's output in ``reply_text`` (the rendered reply)."""
        produced = self.tokenizer.decode([last_token]) if last_token in self.eos_token_ids else None
        for marker in self.end_markers:
            at = reply_text.rfind(marker)
            if at >= 0:
                return reply_text[at + len(marker) :] if marker == produced else reply_text[at:]
        return ""

    def render(self, messages: list[dict], tools: list | None, options: dict, generation_prompt: bool) -> str:
        from jinja2 import TemplateError as JinjaError

        if not self.tokenizer.chat_template:
            raise TemplateError(
                500,
                f"the tokenizer of {self.tokenizer.name_or_path} has no chat template; give the "
                "model directory one (tokenizer_config.json) or use /v1/completions",
            )
        try:
            return self.tokenizer.apply_chat_template(
                [_for_template(message) for message in messages],
                tools=tools or None,
                tokenize=False,
                add_generation_prompt=generation_prompt,
                **options,
            )
        except (JinjaError, TypeError) as exc:
            raise TemplateError(400, f"the chat template refused the messages: {type(exc).__name__}: {exc}") from None


def _load_tokenizer(model_path: Path):
    """A fast tokenizer straight from ``tokenizer.json`` (AutoTokenizer would import torch:
    seconds more at start-up, for the same ids); AutoTokenizer for the others."""
    if (model_path / "tokenizer.json").is_file():
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(str(model_path))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_path))


def _for_template(message: dict) -> dict:
    """A message as chat templates expect it: tool-call arguments as objects, not JSON strings."""
    if "tool_calls" not in message:
        return message
    calls = []
    for call in message["tool_calls"]:
        function = dict(call["function"])
        function["arguments"] = _json_object(function.get("arguments"))
        calls.append({**call, "function": function})
    return {**message, "tool_calls": calls}


def _json_object(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
        return parsed if isinstance(parsed, dict) else arguments
    return arguments
