"""The ``sessions`` middleware: OpenAI-compatible endpoints that record token-exact trajectories.

Routes it answers (every other request goes on down the chain):

- ``POST /v1/chat/completions``: applies the model's chat template, sends the token ids to
  ``/generate`` (down the chain, so ``retry`` and the router apply), answers in OpenAI's format;
- ``POST /v1/completions``: the same for a text (or token-id) prompt;
- ``GET /v1/models``: the served model;
- ``GET /sessions/{id}``: the session as a `Sample` (``Sample.to_dict()`` JSON);
- ``DELETE /sessions/{id}``: the same, and the session is forgotten.

A request belongs to a session when it names one (header ``X-Session-Id``, or a
``session_id`` field in the body, e.g. the ``openai`` client's ``extra_body``); its
``/generate`` calls then carry the session as sglang-router's routing key, so the session
stays on one engine. A request without a session is answered and not recorded.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from slime_core.engine import parse_generate
from slime_router.handlers import ROUTING_KEY_HEADER, SESSION_HEADER, HTTPError, Request, Response, json_request
from slime_router.sessions import openai_api
from slime_router.sessions.chat_template import ChatTemplate, TemplateError
from slime_router.sessions.tool_calls import assistant_message
from slime_router.sessions.trajectory import Trajectory

if TYPE_CHECKING:
    from slime_core.config import Config

SESSIONS_PREFIX = "/sessions/"
MAX_SESSION_ID = 256


def sessions_middleware(next_handler, config: Config):
    return Sessions(next_handler, ChatTemplate.load(config.hf_checkpoint), str(config.hf_checkpoint)).handle


class Sessions:
    """The session store and the routes that fill and read it."""

    def __init__(self, next_handler, template: ChatTemplate, model: str):
        self.next_handler = next_handler
        self.template = template
        self.model = model
        self.trajectories: dict[str, Trajectory] = {}

    async def handle(self, request: Request) -> Response:
        route = (request.method, request.path)
        try:
            if route == ("POST", "/v1/chat/completions"):
                return await self.chat(request)
            if route == ("POST", "/v1/completions"):
                return await self.completion(request)
        except TemplateError as exc:
            raise HTTPError(exc.status, str(exc)) from None
        if route == ("GET", "/v1/models"):
            return Response.json(
                {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "slime"}]}
            )
        if request.path.startswith(SESSIONS_PREFIX) and request.method in ("GET", "DELETE"):
            return self.session(request.path[len(SESSIONS_PREFIX) :], forget=request.method == "DELETE")
        return await self.next_handler(request)

    async def chat(self, request: Request) -> Response:
        body = request.json_object()
        asked, session = openai_api.parse_chat(body), _session_id(request, body)
        async with self._locked(session) as trajectory:
            turn = trajectory.chat_turn(asked.messages, self.template, asked.tools, asked.template_options)
            result = await self._generate(turn.prompt_ids, asked.sampling, session)
            reply = openai_api.normalise_messages([assistant_message(result.text, asked.tools)])[0]
            if session is not None:
                trajectory.record(turn, result, prompt=asked.messages, reply=reply)
        answer = openai_api.chat_answer(
            asked, asked.model or self.model, reply, result, len(turn.prompt_ids), self._token_text
        )
        return openai_api.respond(asked, answer, _session_headers(session))

    async def completion(self, request: Request) -> Response:
        body = request.json_object()
        asked, session = openai_api.parse_completion(body), _session_id(request, body)
        async with self._locked(session) as trajectory:
            turn = trajectory.completion_turn(asked.prompt, self.template)
            result = await self._generate(turn.prompt_ids, asked.sampling, session)
            if session is not None:
                trajectory.record(turn, result, prompt=turn.new_text, reply=None)
        answer = openai_api.completion_answer(
            asked, asked.model or self.model, result, len(turn.prompt_ids), self._token_text
        )
        return openai_api.respond(asked, answer, _session_headers(session))

    @contextlib.asynccontextmanager
    async def _locked(self, session: str | None) -> AsyncIterator[Trajectory]:
        """The session's trajectory, locked for one turn (a fresh, unrecorded one without a session)."""
        trajectory = Trajectory("") if session is None else self.trajectories.setdefault(session, Trajectory(session))
        try:
            async with trajectory.lock:
                yield trajectory
        finally:
            if session is not None and trajectory.sample is None and self.trajectories.get(session) is trajectory:
                del self.trajectories[session]  # its first turn failed: keep no empty session
            elif session is not None and trajectory.sample is not None:
                self.trajectories.setdefault(session, trajectory)  # (in case a failed first turn dropped it meanwhile)

    async def _generate(self, prompt_ids: list[int], sampling: dict, session: str | None):
        body = {"input_ids": prompt_ids, "sampling_params": sampling, "return_logprob": True}
        headers = {ROUTING_KEY_HEADER: session} if session else {}
        answer = await self.next_handler(json_request("/generate", body, headers))
        if answer.status != 200:
            raise HTTPError(answer.status, f"/generate answered {answer.status}: {answer.error_message()}")
        data = answer.data()
        if not isinstance(data, dict) or "output_ids" not in data:
            raise HTTPError(502, f"the engine's /generate answer is not SGLang's JSON: {answer.body[:200]!r}")
        return parse_generate(data)

    def session(self, session: str, forget: bool) -> Response:
        trajectory = self.trajectories.get(session)
        if trajectory is None:
            raise HTTPError(
                404,
                f"no session {session!r} ({len(self.trajectories)} sessions are kept); a session "
                "exists once a request naming it was answered, until it is deleted",
            )
        sample = trajectory.to_sample()
        if forget:
            del self.trajectories[session]
        return Response.json(sample.to_dict())

    def _token_text(self, token: int) -> str:
        return self.template.tokenizer.decode([token])


def _session_id(request: Request, body: dict) -> str | None:
    header, field = request.headers.get(SESSION_HEADER), body.get("session_id")
    if header and field and header != field:
        raise HTTPError(
            400, f"the {SESSION_HEADER} header ({header!r}) and the session_id field ({field!r}) differ; give one"
        )
    session = header or field
    if session is not None and (
        not isinstance(session, str) or not 0 < len(session) <= MAX_SESSION_ID or "/" in session
    ):
        raise HTTPError(
            400, f"a session id must be a string of 1 to {MAX_SESSION_ID} characters without '/', got {session!r}"
        )
    return session


def _session_headers(session: str | None) -> dict[str, str]:
    return {SESSION_HEADER: session} if session else {}
