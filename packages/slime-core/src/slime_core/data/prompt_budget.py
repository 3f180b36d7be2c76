"""How long a prompt may be for the engine to take it with a whole response.

An engine serves at most its context length of tokens per request: ``--sglang-context-length``
where given (SGLang and the CPU engine take it), else the model's ``max_position_embeddings``
(which both default to). SGLang refuses (HTTP 400) a request whose prompt plus
``max_new_tokens`` reaches that length, and the rollout asks for ``--rollout-max-response-len``
new tokens (evaluation: ``--eval-max-response-len``). So a prompt may have at most

    context − response − 1 tokens

on SGLang; an engine whose server shortens the response to fit instead (the CPU engine,
marked with `shortens_responses`) refuses only a prompt that fills its context, so there a
prompt may have context − 1 tokens. A longer prompt would fail its request mid-training: it
is reported before start-up with file:line (`slime_core.data.checks`), or dropped when the
data is loaded if the user asks for that with ``--rollout-max-prompt-len`` (slime's meaning).
Only runs that generate (not SFT, not replayed rollouts) have a budget.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from slime_core.components import run_generates

if TYPE_CHECKING:
    from slime_core.config import Config


@dataclass(frozen=True)
class PromptBudget:
    """The longest prompt the engine takes with a whole response, and how it was computed."""

    context: int  # the engines' context length, in tokens
    source: str  # where that comes from, e.g. "max_position_embeddings of --hf-checkpoint"
    response: int  # new tokens each request asks for
    response_flag: str  # the option that says so: --rollout-max-response-len or --eval-max-response-len

    @property
    def tokens(self) -> int:
        return self.context - self.response - 1

    @property
    def why(self) -> str:
        return f"{self.tokens} = {self.context} ({self.source}) − {self.response} ({self.response_flag}) − 1"


def shortens_responses(command_fn: Callable) -> Callable:
    """Mark a rollout engine's command (``slime_register_rollout_engines``) whose server
    shortens a response to fit its context instead of refusing the request: its prompts need
    no room for a whole response."""
    command_fn.shortens_responses = True
    return command_fn


def engine_context(config: Config) -> tuple[int, str] | None:
    """The engines' context length and where it comes from; None when unknown (no
    ``--sglang-context-length``, no model config with ``max_position_embeddings``)."""
    given = config.sglang.get("context_length")
    if given is not None:
        try:
            return int(given), "--sglang-context-length"
        except (TypeError, ValueError):
            return None  # not a number: SGLang says so itself
    try:
        model = json.loads((Path(config.hf_checkpoint) / "config.json").read_text())
    except (OSError, TypeError, ValueError):
        return None  # no model directory (yet): reported by the model checks of a real run
    if not isinstance(model, dict):
        return None
    positions = model.get("max_position_embeddings", (model.get("text_config") or {}).get("max_position_embeddings"))
    return (positions, "max_position_embeddings of --hf-checkpoint") if isinstance(positions, int) else None


def prompt_budget(
    config: Config, evaluation: bool, plugins, response: tuple[int, str] | None = None
) -> PromptBudget | None:
    """The budget of the rollout's prompts (``evaluation``: of the evaluation's; ``response``:
    an evaluation dataset's own ``(max_response_len, where it is set)``, e.g. from
    ``--eval-config``); None for a run without engines or with an unknown context length."""
    if not run_generates(config, plugins):
        return None
    context = engine_context(config)
    if context is None:
        return None
    tokens, flag = config.rollout_max_response_len, "--rollout-max-response-len"
    if evaluation and response is not None:
        tokens, flag = response
    elif evaluation and config.get("eval_max_response_len") is not None:
        tokens, flag = config.eval_max_response_len, "--eval-max-response-len"
    engines = plugins.registry("rollout_engines")
    name = config.get("rollout_engine")
    if name in engines and getattr(engines.get(name), "shortens_responses", False):
        tokens, flag = 0, f"--rollout-engine {name} shortens the response to fit"
    return PromptBudget(*context, tokens, flag)
