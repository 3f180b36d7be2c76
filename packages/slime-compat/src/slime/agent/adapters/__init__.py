"""slime.agent.adapters: slime's OpenAI / Anthropic API servers for coding agents in E2B sandboxes;
`AnthropicAdapter`, `OpenAIAdapter` and `BaseAdapter` import but raise on use (see `slime.agent`);
`common.flatten_content` works."""

from slime.agent import unavailable
from slime.agent.adapters.common import BaseAdapter

__all__ = ["AnthropicAdapter", "BaseAdapter", "OpenAIAdapter"]

AnthropicAdapter = unavailable("slime.agent.adapters.AnthropicAdapter")
OpenAIAdapter = unavailable("slime.agent.adapters.OpenAIAdapter")
