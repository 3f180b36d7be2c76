"""MoE routing replay, as slime offers it: its options, what they need, and the routing's wire format.

- ``--use-rollout-routing-replay`` (R3, arXiv 2510.11370): the engine returns the experts it routed
  each token to, and the trainer routes every token to those experts when it computes π_old and in
  every update; the trainer's log-probs then differ from the engine's only by numerics, not by a
  token sent to other experts. It implies ``--use-routing-replay``, as in slime.
- ``--use-routing-replay`` (R2, arXiv 2507.18071): the trainer records its own routing when it
  computes π_old and replays it in every update of the rollout, so a step whose weights have moved
  still routes as π_old did (the ratio measures the weights, not a flipped expert).

The reference and teacher models route by themselves. The wire format is SGLang's: a request with
``"return_routed_experts": true`` (the server started with ``--enable-return-routed-experts``) is
answered with ``meta_info["routed_experts"]``, base64 of int32: for each token the engine fed
through the model (the prompt and the output but its last token: ``len(tokens) - 1`` rows), for
each decoder layer in order, the ``top_k`` experts it picked (a dense layer's are zeros). A
`Sample` keeps them as ``rollout_routed_experts``, one row per token of ``num_layers × top_k``
ids (slime's field, whose tensor is the same numbers shaped ``(len(tokens) - 1, num_layers, top_k)``).

This module imports nothing heavy; the routers' hooks are `slime_core.moe_routers`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slime_core.config.config import Config

#: SGLang's request field that asks for each token's routed experts, and its answer's meta_info key.
REQUEST_FIELD, ANSWER_KEY = "return_routed_experts", "routed_experts"
#: the model types whose routers `slime_core.moe_routers` taps (the MoE families slime's tiny models cover)
REPLAYED_MODEL_TYPES = ("qwen3_moe", "qwen3_next", "deepseek_v3", "glm4_moe", "glm_moe_dsa")
#: config.json keys that count a MoE model's routed experts (Qwen, DeepSeek/GLM, Mixtral).
EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")


def returns_routed_experts(command_fn: Callable) -> Callable:
    """Mark a rollout engine's command (``slime_register_rollout_engines``) whose server answers
    ``return_routed_experts`` requests with the routing (see the module docstring), which
    ``--use-rollout-routing-replay`` needs."""
    command_fn.returns_routed_experts = True
    return command_fn


def routing_shape(model: dict) -> tuple[int, int] | None:
    """``(num_layers, top_k)`` of a routing row's ids for a model's config.json keys; None for a
    dense model (no routed experts)."""
    if not any(model.get(key) for key in EXPERT_KEYS):
        return None
    return int(model["num_hidden_layers"]), int(model.get("num_experts_per_tok") or model.get("moe_router_topk") or 1)


def replay_problems(config: Config) -> list[str]:
    """Why routing replay cannot apply to ``--hf-checkpoint``'s model (a dense model routes nothing)."""
    if not config.get("use_routing_replay"):
        return []
    from slime_core.config.accepted_flags import read_model_config

    flag = "--use-rollout-routing-replay" if config.get("use_rollout_routing_replay") else "--use-routing-replay"
    model = read_model_config(config.get("hf_checkpoint"))
    if model is None:
        return []  # an unreadable model is the model-directory check's to report
    if routing_shape(model) is None:
        return [
            f"{flag} replays the routing of MoE layers, but --hf-checkpoint {config.hf_checkpoint} is a dense "
            f"model (config.json names no {' / '.join(EXPERT_KEYS)}); drop {flag}"
        ]
    if model.get("model_type") not in REPLAYED_MODEL_TYPES:
        return [
            f"{flag}: the routers of model_type {model.get('model_type')!r} (--hf-checkpoint {config.hf_checkpoint}) "
            f"are not among those routing replay knows ({', '.join(REPLAYED_MODEL_TYPES)}); drop {flag}"
        ]
    return []


def engine_problem(config: Config, engines) -> str | None:
    """Why ``--rollout-engine``'s servers cannot give R3 the routing (``engines``: the registry of
    rollout engines), or None."""
    if not config.get("use_rollout_routing_replay") or config.get("rollout_external_engine_addrs"):
        return None
    name = config.get("rollout_engine")
    if name in engines and getattr(engines.get(name), "returns_routed_experts", False):
        return None
    return (
        f"--use-rollout-routing-replay needs each token's routed experts from the engine, and --rollout-engine "
        f"{name} does not say it returns them; use --rollout-engine cpu or sglang, or drop the flag"
    )


def routing_rows(flat: list[int], rows: int, where: str) -> list[list[int]]:
    """An engine's routing (``flat``: every token's ids, token after token) as ``rows`` rows;
    ValueError naming ``where`` when the count does not divide into them."""
    if rows <= 0 or len(flat) % rows:
        raise ValueError(
            f"{where}: the engine returned {len(flat)} routed-expert ids, which do not make one row per token "
            f"it fed ({rows}); is the engine's return_routed_experts broken?"
        )
    width = len(flat) // rows
    return [flat[i * width : (i + 1) * width] for i in range(rows)]
