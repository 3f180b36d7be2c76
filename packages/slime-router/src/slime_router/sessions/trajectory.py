"""One session's trajectory: the exact tokens the model saw and produced, turn after turn.

A trajectory is a `Sample` that only grows. Turn 1's prompt tokens are the sample's prompt;
every later turn appends the tokens that arrived in between (the end of the model's turn that
the template adds, tool results, user messages, the next generation prompt) with loss mask 0,
then the model's output as sampled (token ids and log-probs from the engine) with loss mask 1.
Nothing is ever re-tokenised: the next prompt is always the recorded tokens plus the new ones.

A request must continue the trajectory: its chat history must start with the messages the
session recorded (its earlier requests' messages and the replies it got, unchanged), or its
completion prompt with the recorded text (or token ids). Anything else is a conflict (409):
a session is one trajectory; branch by starting a new session.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field

from slime_core.engine import GenerateResult, append_result
from slime_core.sample import Sample
from slime_router.handlers import HTTPError
from slime_router.sessions.chat_template import ChatTemplate


@dataclass
class Turn:
    """What one request adds before generating: the prompt to send and the tokens new to the session."""

    prompt_ids: list[int]  # the whole prompt for /generate
    new_ids: list[int]  # tokens after the recorded ones (all of them on the first turn)
    new_text: str
    messages: list[dict] = field(default_factory=list)  # chat: the request's messages


class Trajectory:
    """The recorded tokens of one session (``sample``), and what they stand for."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        self.sample: Sample | None = None  # None until the first turn is answered
        self.kind: str | None = None  # "chat" or "completion", fixed by the first turn
        self.messages: list[dict] = []  # chat: every message so far, the replies as answered
        self.lock = asyncio.Lock()  # one turn at a time

    # ---- planning a turn (nothing changes until `record`) -------------------------------

    def chat_turn(self, messages: list[dict], template: ChatTemplate, tools: list | None, options: dict) -> Turn:
        self._check_kind("chat")
        if self.sample is None:
            ids = template.first_prompt(messages, tools, options)
            return Turn(ids, ids, template.tokenizer.decode(ids), messages)
        self._check_history(messages)
        text = template.continuation(
            messages[: len(self.messages)], messages[len(self.messages) :], self._last_token(), tools, options
        )
        new_ids = template.encode(text)
        return Turn(self.sample.tokens + new_ids, new_ids, text, messages)

    def completion_turn(self, prompt: str | list[int], template: ChatTemplate) -> Turn:
        self._check_kind("completion")
        if self.sample is None:
            ids = template.encode(prompt) if isinstance(prompt, str) else list(prompt)
            return Turn(ids, ids, prompt if isinstance(prompt, str) else template.tokenizer.decode(ids))
        recorded = self.sample.tokens if isinstance(prompt, list) else self.sample.prompt + self.sample.response
        if prompt[: len(recorded)] != recorded:
            what = "token ids" if isinstance(prompt, list) else "text"
            raise HTTPError(
                409,
                f"session {self.session_id!r}: the prompt does not start with the session's {what} so far "
                "(its prompt and completions); continue it, or start a new session",
            )
        if isinstance(prompt, list):
            new_ids = prompt[len(recorded) :]
            return Turn(self.sample.tokens + new_ids, new_ids, template.tokenizer.decode(new_ids))
        text = prompt[len(recorded) :]
        new_ids = template.encode(text)
        return Turn(self.sample.tokens + new_ids, new_ids, text)

    def _check_kind(self, kind: str) -> None:
        if self.kind not in (None, kind):
            raise HTTPError(
                409, f"session {self.session_id!r} is a {self.kind} session; send {kind} requests in a new session"
            )

    def _check_history(self, messages: list[dict]) -> None:
        recorded = self.messages
        for i, (sent, kept) in enumerate(zip(messages, recorded)):
            if sent != kept:
                raise HTTPError(
                    409,
                    f"session {self.session_id!r}: messages[{i}] ({sent['role']}) differs from what the "
                    f"session recorded ({str(kept)[:200]}); send the history unchanged, or start a "
                    "new session",
                )
        if len(messages) <= len(recorded):
            raise HTTPError(
                409,
                f"session {self.session_id!r} already has these {len(recorded)} messages and the reply "
                "to them; add the next message (a tool result or a user turn), or start a new session",
            )

    def _last_token(self) -> int | None:
        response = self.sample.tokens[self.sample.prompt_length :]
        return response[-1] if response and self.sample.loss_mask[-1] == 1 else None

    # ---- recording a generated turn -----------------------------------------------------

    def record(self, turn: Turn, result: GenerateResult, prompt, reply: dict | None) -> None:
        """Add the turn's new tokens (loss mask 0 after the first turn) and the model's output (mask 1)."""
        if self.sample is None:
            self.kind = "chat" if reply is not None else "completion"
            self.sample = Sample(prompt=prompt, tokens=list(turn.prompt_ids), metadata={"session_id": self.session_id})
        elif turn.new_ids:
            self.sample.append_response(turn.new_ids, trainable=False, text=turn.new_text)
        append_result(self.sample, result)
        if reply is not None:
            self.messages = [*turn.messages, reply]
            self.sample.metadata["messages"] = self.messages

    def to_sample(self) -> Sample:
        """A copy of the trajectory as a `Sample` (tokens, response_length, loss_mask,
        rollout_log_probs, weight_versions, status; metadata: session_id, and the messages)."""
        if self.sample is None:
            raise HTTPError(409, f"session {self.session_id!r} has no answered turn yet")
        sample = copy.deepcopy(self.sample)
        sample.check()
        return sample
