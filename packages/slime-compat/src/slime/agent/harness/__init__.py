"""slime.agent.harness: `ClaudeCodeHarness` and `CodexHarness` (the coding-agent CLIs slime runs in
E2B sandboxes) import but raise on use (see `slime.agent`)."""

from slime.agent import unavailable

__all__ = ["ClaudeCodeHarness", "CodexHarness"]

ClaudeCodeHarness = unavailable("slime.agent.harness.ClaudeCodeHarness")
CodexHarness = unavailable("slime.agent.harness.CodexHarness")
