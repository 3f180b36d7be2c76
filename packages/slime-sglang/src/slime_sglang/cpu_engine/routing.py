"""Each token's routed experts, for requests that ask (``return_routed_experts``, routing replay R3).

The scheduler records the routers' picks (`slime_core.moe_routers.RouterTaps`) during a prefill
or a decode step that serves such a request, and hands each request the rows of its own tokens:
a prefill row's last ``len(prompt)`` columns (rows are left-padded, and requests with the same
prompt share one, `batch.prompt_rows`), a decode step's one column per request. A finished
request so holds a row for every token it fed (its prompt, and its output but the last token),
which `request.answer` sends as SGLang does (`slime_core.routing_replay`).
"""

from __future__ import annotations

from contextlib import contextmanager

from slime_core.moe_routers import RouterTaps
from slime_core.routing_replay import routing_shape
from slime_sglang.cpu_engine.batch import prompt_rows
from slime_sglang.cpu_engine.request import BadRequest, GenerateRequest


class EngineRouting:
    """The taps on a MoE model's routers, and the rows they give the requests that asked."""

    def __init__(self, model):
        self.taps = RouterTaps(model)

    @contextmanager
    def prefill(self, requests: list[GenerateRequest]):
        """Around the prefill of ``requests``: the asking ones get their prompt's rows."""
        if not any(r.return_routed_experts for r in requests):
            yield
            return
        with self.taps.recording() as recorded:
            yield
        prompts, row_of = prompt_rows(requests)
        width = max(len(p) for p in prompts)
        rows = self.taps.rows(recorded).view(len(prompts), width, -1)
        for request, row in zip(requests, row_of.tolist()):
            if request.return_routed_experts:
                request.routed_experts.extend(rows[row, width - len(request.input_ids) :].tolist())

    @contextmanager
    def decode(self, requests: list[GenerateRequest]):
        """Around a decode step of ``requests`` (one token each): the asking ones get its row."""
        if not any(r.return_routed_experts for r in requests):
            yield
            return
        with self.taps.recording() as recorded:
            yield
        rows = self.taps.rows(recorded).view(len(requests), -1)
        for request, row in zip(requests, rows.tolist()):
            if request.return_routed_experts:
                request.routed_experts.append(row)


def engine_routing(model) -> EngineRouting | None:
    """The routing taps of ``model``, or None for a dense model (which routes nothing)."""
    config = model.config.to_dict()
    return EngineRouting(model) if routing_shape({**config, **config.get("text_config", {})}) else None


def refuse_without_routing(routing: EngineRouting | None, request: GenerateRequest) -> None:
    """``BadRequest`` for a request that asks a dense model for its routed experts."""
    if routing is None and request.return_routed_experts:
        raise BadRequest("return_routed_experts: this engine serves a dense model, which routes no tokens to experts")
