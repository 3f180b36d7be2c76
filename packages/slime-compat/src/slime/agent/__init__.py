"""slime.agent: the names slime's coding-agent example (``examples/coding_agent_rl``) imports.

That example runs Claude Code / Codex inside E2B cloud sandboxes (a third-party service: the
``e2b`` package and an ``E2B_API_KEY``), talking to the policy through slime's OpenAI /
Anthropic API adapters. slime-compat does not drive E2B: `aiohttp_threaded`,
``adapters.common.flatten_content`` and the ``sandbox.Sandbox`` protocol work, and the sandbox,
harness and adapter classes import but raise on use, saying what they need (`unavailable`).
"""

from __future__ import annotations

NEEDS_E2B = (
    "slime's coding agents run in E2B cloud sandboxes (the e2b package and an E2B_API_KEY), which "
    "slime-compat does not drive; run examples/coding_agent_rl with THUDM slime, or give your generate "
    "function a sandbox of your own (any class with slime.agent.sandbox.Sandbox's methods)"
)


def unavailable(name: str):
    """A stand-in for slime's class ``name``: it imports, and constructing it raises saying why."""

    class Unavailable:
        def __init__(self, *args, **kwargs):
            raise RuntimeError(f"{name} is not provided by slime-compat: {NEEDS_E2B}")

    Unavailable.__name__ = Unavailable.__qualname__ = name.rsplit(".", 1)[-1]
    Unavailable.__doc__ = f"Not provided here (slime's {name}): constructing it raises."
    return Unavailable
