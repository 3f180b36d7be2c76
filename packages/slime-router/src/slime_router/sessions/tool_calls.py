"""Tool calls in a model's output, in the Hermes format that Qwen2.5, Qwen3 and many other
chat templates teach: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

Only requests that offer ``tools`` are parsed. The token ids are never touched: the session
records what the model sampled; the parsed calls only shape the answer's ``message``.
"""

from __future__ import annotations

import json
import re
import uuid

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def assistant_message(text: str, tools: list | None) -> dict:
    """The OpenAI ``message`` for a model output ``text``: its content, and its tool calls when
    the request offered tools and the output calls them."""
    calls = []

    def take(match: re.Match) -> str:
        call = _call(match.group(1))
        if call is None:
            return match.group(0)  # not a well-formed call: it stays in the content
        calls.append(call)
        return ""

    content = TOOL_CALL.sub(take, text) if tools else text
    if not calls:
        return {"role": "assistant", "content": text}
    return {"role": "assistant", "content": content.strip(), "tool_calls": calls}


def _call(payload: str) -> dict | None:
    try:
        parsed = json.loads(payload)
    except json.JSONDecodeError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("name"), str):
        return None
    arguments = parsed.get("arguments", {})
    function = {"name": parsed["name"], "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": function}
