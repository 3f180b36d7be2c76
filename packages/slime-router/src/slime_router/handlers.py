"""Requests, responses and handlers: what router middlewares receive, return and wrap.

A handler is ``async handler(request: Request) -> Response``. A middleware is a factory
``factory(next_handler, config) -> handler`` (registered with
``slime_register_router_middlewares``); the factories are called once, when the router's
front starts, and the handlers they return run for every request. The innermost handler
forwards to sglang-router (`slime_router.proxy`).

Bodies are whole ``bytes``: the front reads a request completely before the chain sees it, so
a middleware may parse, rewrite or resend it (``retry`` resends it as is).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

#: ``sglang-router`` sends requests that carry the same key to the same engine (``--router-policy
#: manual``, slime-router's default).
ROUTING_KEY_HEADER = "x-smg-routing-key"
#: Clients name their session with this header (or a ``session_id`` body field on the OpenAI routes).
SESSION_HEADER = "x-session-id"


class HTTPError(Exception):
    """A request the chain refuses or cannot serve; the front answers ``status`` with ``message``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Request:
    """One HTTP request, read completely."""

    method: str  # "GET", "POST", ...
    path: str  # "/generate", without the query string
    query: str = ""  # raw query string, without "?"
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case
    body: bytes = b""

    def json(self) -> Any:
        """The body parsed as JSON, or ``HTTPError(400)`` saying what is wrong with it."""
        if not self.body.strip():
            raise HTTPError(400, f"{self.method} {self.path} needs a JSON body")
        try:
            return json.loads(self.body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise HTTPError(400, f"the body of {self.method} {self.path} is not valid JSON ({exc})") from None

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object, or ``HTTPError(400)``."""
        body = self.json()
        if not isinstance(body, dict):
            raise HTTPError(
                400, f"the body of {self.method} {self.path} must be a JSON object, got {type(body).__name__}"
            )
        return body

    def with_headers(self, headers: dict[str, str]) -> Request:
        """A copy with ``headers`` (lower-case names) added or replaced."""
        return replace(self, headers={**self.headers, **headers})


def json_request(path: str, data: Any, headers: dict[str, str] | None = None) -> Request:
    """A POST request with a JSON body (a middleware calling the next handler itself)."""
    return Request(
        "POST", path, headers={"content-type": "application/json", **(headers or {})}, body=json.dumps(data).encode()
    )


@dataclass
class Response:
    """One HTTP response."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case
    _data: Any = field(default=None, repr=False)  # the parsed JSON body, once parsed

    @classmethod
    def json(cls, data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        body = json.dumps(data).encode()
        return cls(status, body, {"content-type": "application/json", **(headers or {})}, data)

    def data(self) -> Any:
        """The body parsed as JSON, or None when it is not JSON."""
        if self._data is None and "json" in self.headers.get("content-type", ""):
            try:
                self._data = json.loads(self.body)
            except (json.JSONDecodeError, UnicodeDecodeError):
                return None
        return self._data

    def error_message(self) -> str:
        """The message of an error answer (ours, sglang-router's or an engine's), else its text."""
        data = self.data()
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict):
            error = error.get("message")
        return str(error) if error else self.body[:500].decode(errors="replace")


def error_response(status: int, message: str) -> Response:
    """An error answer in OpenAI's shape, which the ``openai`` client shows as the exception message."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return Response.json({"error": {"message": message, "type": kind, "code": status}}, status)


Handler = Callable[[Request], Awaitable[Response]]
