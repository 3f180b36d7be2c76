"""OpenAI's ``/v1/chat/completions`` and ``/v1/completions``: reading requests, writing answers.

Requests are checked field by field, so a malformed one gets a 400 that says what to fix.
Sampling fields map to SGLang's sampling params (``max_tokens`` -> ``max_new_tokens``, ``seed``
-> ``sampling_seed``; SGLang's own ``top_k``, ``min_p``, ``ignore_eos``, ``stop_token_ids``,
``repetition_penalty`` are accepted too, e.g. through the client's ``extra_body``); the engine
checks their values. One choice per request (``n`` = 1): a session is one trajectory.
``stream: true`` is answered as server-sent events, all at once when the generation is done.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from slime_core.engine import GenerateResult
from slime_router.handlers import HTTPError, Response

#: OpenAI (and SGLang) request fields -> SGLang sampling params.
SAMPLING_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "max_tokens": "max_new_tokens",
    "max_completion_tokens": "max_new_tokens",
    "stop": "stop",
    "seed": "sampling_seed",
    "stop_token_ids": "stop_token_ids",
    "ignore_eos": "ignore_eos",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "repetition_penalty": "repetition_penalty",
}
#: Fields accepted on both routes without changing the generation.
COMMON_FIELDS = {"model", "n", "stream", "stream_options", "logprobs", "user", "session_id", "store", "metadata"}
CHAT_FIELDS = COMMON_FIELDS | {
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "top_logprobs",
    "chat_template_kwargs",
}
COMPLETION_FIELDS = COMMON_FIELDS | {"prompt", "echo"}
ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass
class GenerationRequest:
    """An OpenAI request, checked: what to generate from, how, and how to answer."""

    sampling: dict[str, Any]  # SGLang sampling params
    model: str | None
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage
    logprobs: bool = False
    messages: list[dict] = field(default_factory=list)  # chat: normalised messages
    tools: list | None = None  # chat: tool schemas for the template (and tool-call parsing)
    template_options: dict = field(default_factory=dict)  # chat: extra chat-template arguments
    prompt: str | list[int] | None = None  # completions: text or token ids


def parse_chat(body: dict) -> GenerationRequest:
    _refuse_unknown(body, CHAT_FIELDS, "/v1/chat/completions")
    if body.get("top_logprobs"):
        raise HTTPError(400, "top_logprobs is not supported; ask for logprobs: true (the sampled tokens' log-probs)")
    if body.get("tool_choice") not in (None, "auto", "none"):
        raise HTTPError(400, f"tool_choice {body['tool_choice']!r} is not supported; use 'auto' (or leave it out)")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise HTTPError(400, "tools must be a list of tool schemas")
    options = body.get("chat_template_kwargs") or {}
    if not isinstance(options, dict):
        raise HTTPError(400, "chat_template_kwargs must be an object of extra chat-template arguments")
    request = _common(body)
    request.messages, request.tools, request.template_options = normalise_messages(body.get("messages")), tools, options
    return request


def parse_completion(body: dict) -> GenerationRequest:
    _refuse_unknown(body, COMPLETION_FIELDS, "/v1/completions")
    if body.get("echo"):
        raise HTTPError(400, "echo is not supported; the prompt is yours already")
    request = _common(body)
    request.prompt = _prompt(body.get("prompt"))
    return request


def _common(body: dict) -> GenerationRequest:
    if body.get("n", 1) != 1:
        raise HTTPError(400, f"n must be 1, got {body['n']!r}: send one request (and one session) per sample")
    stream_options = body.get("stream_options") or {}
    return GenerationRequest(
        sampling={
            SAMPLING_FIELDS[key]: value for key, value in body.items() if key in SAMPLING_FIELDS and value is not None
        },
        model=body.get("model"),
        stream=bool(body.get("stream")),
        include_usage=bool(isinstance(stream_options, dict) and stream_options.get("include_usage")),
        logprobs=bool(body.get("logprobs")),
    )


def _refuse_unknown(body: dict, known: set[str], route: str) -> None:
    unknown = sorted(set(body) - known - set(SAMPLING_FIELDS))
    if unknown:
        raise HTTPError(
            400,
            f"{route} does not support {', '.join(map(repr, unknown))}; "
            f"supported: {', '.join(sorted(known | set(SAMPLING_FIELDS)))}",
        )


def _prompt(prompt) -> str | list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str) and prompt:
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return prompt
    raise HTTPError(400, "prompt must be a non-empty string or list of token ids (one prompt per request)")


# ---- messages ---------------------------------------------------------------------------


def normalise_messages(raw) -> list[dict]:
    """Messages with only what the template and the session compare: role, text content,
    tool calls (arguments as JSON text), tool_call_id, name."""
    if not isinstance(raw, list) or not raw:
        raise HTTPError(400, 'messages must be a non-empty list of {"role": ..., "content": ...} objects')
    return [_message(message, i) for i, message in enumerate(raw)]


def _message(raw, i: int) -> dict:
    if not isinstance(raw, dict):
        raise HTTPError(400, f"messages[{i}] must be an object with role and content, got {type(raw).__name__}")
    if raw.get("role") not in ROLES:
        raise HTTPError(400, f"messages[{i}].role must be one of {', '.join(ROLES)}, got {raw.get('role')!r}")
    message = {"role": raw["role"], "content": _text(raw.get("content"), i)}
    if raw.get("tool_calls"):
        if raw["role"] != "assistant" or not isinstance(raw["tool_calls"], list):
            raise HTTPError(400, f"messages[{i}].tool_calls must be a list, on an assistant message")
        message["tool_calls"] = [_tool_call(call, i, j) for j, call in enumerate(raw["tool_calls"])]
    for key in ("tool_call_id", "name"):
        if raw.get(key):
            message[key] = str(raw[key])
    return message


def _text(content, i: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = [part for part in content if not (isinstance(part, dict) and part.get("type") == "text")]
        if not parts:
            return "".join(part.get("text", "") for part in content)
        kind = parts[0].get("type") if isinstance(parts[0], dict) else type(parts[0]).__name__
        raise HTTPError(400, f"messages[{i}].content: only text parts are supported, got {kind!r}")
    raise HTTPError(
        400, f"messages[{i}].content must be a string or a list of text parts, got {type(content).__name__}"
    )


def _tool_call(call, i: int, j: int) -> dict:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise HTTPError(
            400,
            f'messages[{i}].tool_calls[{j}] must be {{"type": "function", "function": {{"name": ..., '
            f'"arguments": ...}}}}',
        )
    arguments = function.get("arguments", "{}")
    function = {
        "name": function["name"],
        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
    }
    return {"id": str(call.get("id") or ""), "type": "function", "function": function}


# ---- answers ----------------------------------------------------------------------------


def chat_answer(
    request: GenerationRequest, model: str, reply: dict, result: GenerateResult, prompt_tokens: int, token_text
) -> dict:
    """A ``chat.completion`` object; ``token_text(id)`` spells one token for the log-probs."""
    tokens = [token_text(token) for token in result.output_ids]
    logprobs = {"content": [_token_logprob(text, logprob) for text, logprob in zip(tokens, result.log_probs)]}
    finish = "tool_calls" if "tool_calls" in reply and result.finish_reason == "stop" else result.finish_reason
    choice = {"index": 0, "message": reply, "finish_reason": finish, "logprobs": logprobs if request.logprobs else None}
    return _answer("chat.completion", "chatcmpl", model, choice, prompt_tokens, len(result.output_ids))


def completion_answer(
    request: GenerationRequest, model: str, result: GenerateResult, prompt_tokens: int, token_text
) -> dict:
    """A ``text_completion`` object."""
    tokens = [token_text(token) for token in result.output_ids]
    offsets = [0, *itertools.accumulate(map(len, tokens))][: len(tokens)]
    logprobs = {"tokens": tokens, "token_logprobs": result.log_probs, "top_logprobs": None, "text_offset": offsets}
    choice = {
        "index": 0,
        "text": result.text,
        "finish_reason": result.finish_reason,
        "logprobs": logprobs if request.logprobs else None,
    }
    return _answer("text_completion", "cmpl", model, choice, prompt_tokens, len(result.output_ids))


def _answer(kind: str, prefix: str, model: str, choice: dict, prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "id": f"{prefix}-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _token_logprob(text: str, logprob: float) -> dict:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode()), "top_logprobs": []}


def respond(request: GenerationRequest, answer: dict, headers: dict[str, str]) -> Response:
    """The answer as JSON, or as server-sent events when the request asked for a stream."""
    if not request.stream:
        return Response.json(answer, headers=headers)
    chunks = _chunks(answer, request.include_usage)
    events = b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks)
    return Response(200, events + b"data: [DONE]\n\n", {"content-type": "text/event-stream", **headers})


def _chunks(answer: dict, include_usage: bool) -> list[dict]:
    """The answer as stream chunks: the content, then the finish reason (then the usage)."""
    choice = answer["choices"][0]
    base = {key: answer[key] for key in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk" if answer["object"] == "chat.completion" else "text_completion"
    if "message" in choice:
        delta = {key: value for key, value in choice["message"].items() if key != "tool_calls"}
        if "tool_calls" in choice["message"]:
            delta["tool_calls"] = [{**call, "index": i} for i, call in enumerate(choice["message"]["tool_calls"])]
        body = {"index": 0, "delta": delta, "logprobs": choice["logprobs"], "finish_reason": None}
        end = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}
    else:
        body = {**choice, "finish_reason": None}
        end = {"index": 0, "text": "", "logprobs": None, "finish_reason": choice["finish_reason"]}
    chunks = [{**base, "choices": [body]}, {**base, "choices": [end]}]
    if include_usage:
        chunks.append({**base, "choices": [], "usage": answer["usage"]})
    return chunks
