"""slime.agent.adapters.common: `flatten_content` (a chat message's content as plain text);
`BaseAdapter` imports but raises on use (see `slime.agent`)."""

from __future__ import annotations

from slime.agent import unavailable

__all__ = ["BaseAdapter", "flatten_content"]

BaseAdapter = unavailable("slime.agent.adapters.common.BaseAdapter")
#: content block types whose ``text`` is the block's text (Anthropic's and OpenAI's)
TEXT_BLOCKS = frozenset({"text", "input_text", "output_text"})
IMAGE_BLOCKS = frozenset({"image", "image_url", "input_image"})


def flatten_content(content) -> str:
    """The text of a message's content in OpenAI's or Anthropic's shape: a string as it is,
    None as "", a list of blocks as their texts one per line (a tool result's nested content
    flattened, an image as ``[image omitted]``), anything else as ``str()``."""
    if content is None:
        return ""
    if not isinstance(content, list):
        return content if isinstance(content, str) else str(content)
    return "\n".join(text for text in map(_block_text, content) if text)


def _block_text(block) -> str:
    if not isinstance(block, dict):
        return str(block)
    kind = block.get("type")
    if kind in TEXT_BLOCKS:
        return block.get("text", "")
    if kind in IMAGE_BLOCKS:
        return "[image omitted]"
    if kind == "tool_result" or "content" in block:
        return flatten_content(block.get("content"))
    return str(block.get("text") or "")
