"""The top-k routers of a transformers MoE model, tapped: record the experts they pick, or make them
pick given ones (routing replay, `slime_core.routing_replay`). The CPU engine records with it, the
FSDP backend records and replays.

transformers' MoE routers return ``(router_logits, top_k_weights, top_k_index)`` for the
``(tokens, hidden)`` rows of a forward (every row of the batch, padding included, row-major). A
forward hook on each router replaces the index by the replayed experts and recomputes their
weights from the router's own logits as the router does, so gradients reach the router as in an
ordinary update, and a replay of the experts the router would pick anyway changes nothing, bit for
bit. Two kinds of router are known:

- softmax (Qwen3-MoE, Qwen3-Next, Qwen3.5-MoE): ``softmax(logits)`` at the experts, renormalised with
  ``norm_topk_prob`` (always, for Qwen3.5-MoE's router, which has no such option);
- sigmoid with a correction bias (DeepSeek-V3, GLM-4.5, GLM-5): ``sigmoid(logits)`` at the experts,
  renormalised with ``norm_topk_prob``, times ``routed_scaling_factor`` (the bias only picks experts).
"""

from __future__ import annotations

import re
from contextlib import contextmanager

import torch

#: transformers' router classes by how they weight their experts (see the module docstring)
SOFTMAX_ROUTERS = ("Qwen3MoeTopKRouter", "Qwen3NextTopKRouter", "Qwen3_5MoeTopKRouter")
SIGMOID_ROUTERS = ("DeepseekV3TopkRouter", "Glm4MoeTopkRouter", "GlmMoeDsaTopkRouter")
_LAYER = re.compile(r"layers\.(\d+)\.")


class RouterTaps:
    """Forward hooks on every MoE router of ``model``; idle until `recording` or `replaying`."""

    def __init__(self, model):
        config = getattr(model.config, "text_config", None) or model.config
        self.num_layers, self.top_k = config.num_hidden_layers, config.num_experts_per_tok
        self.routers = {int(_LAYER.search(name).group(1)): m for name, m in model.named_modules() if _is_router(m)}
        if not self.routers:
            raise ValueError(
                f"routing replay knows no router of {type(model).__name__}: it replays "
                f"{', '.join(SOFTMAX_ROUTERS + SIGMOID_ROUTERS)}"
            )
        self.recorded: dict[int, torch.Tensor] | None = None  # layer -> (tokens, top_k) while recording
        self.replayed: torch.Tensor | None = None  # (tokens, num_layers, top_k) while replaying
        self.own: dict[int, torch.Tensor] | None = None  # layer -> the router's own picks while replaying
        for layer, router in self.routers.items():
            router.register_forward_hook(lambda module, args, output, layer=layer: self._hook(layer, module, output))

    @contextmanager
    def recording(self):
        """Within the block, each router's picks of the latest forward: ``{layer: (tokens, top_k)}``."""
        self.recorded = {}
        try:
            yield self.recorded
        finally:
            self.recorded = None

    @contextmanager
    def replaying(self, experts: torch.Tensor):
        """Within the block, every forward routes row i of its tokens to ``experts[i, layer]``
        ((tokens, num_layers, top_k) ids); yields ``{layer: (tokens, top_k)}``, the routers' own picks."""
        self.replayed, self.own = experts, {}
        try:
            yield self.own
        finally:
            self.replayed, self.own = None, None

    def rows(self, recorded: dict[int, torch.Tensor]) -> torch.Tensor:
        """``recorded`` as (tokens, num_layers, top_k) ids, zeros for the dense layers (as SGLang sends them)."""
        some = next(iter(recorded.values()))
        out = torch.zeros((some.shape[0], self.num_layers, self.top_k), dtype=torch.long)
        for layer, picks in recorded.items():
            out[:, layer] = picks.cpu()
        return out

    def _hook(self, layer: int, router, output):
        logits, weights, index = output
        if self.replayed is not None:
            if self.replayed.shape[0] != index.shape[0]:
                raise ValueError(f"routing replay got {self.replayed.shape[0]} rows for {index.shape[0]} tokens")
            self.own[layer] = index.detach()
            index = self.replayed[:, layer].to(index.device, index.dtype)
            weights = expert_weights(router, logits, index).to(weights.dtype)
        if self.recorded is not None:
            self.recorded[layer] = index.detach()
        return logits, weights, index


def replay_mismatch(counts: dict[str, list[int]], phase: str) -> dict[str, float]:
    """``routing_replay_<phase>_mismatch``: the share of ``phase``'s routing decisions the replay
    changed (``counts[phase]``: changed, decisions) over every rank, then zeroes the counts; empty
    without any decision. Both backends' routing replays report it."""
    from slime_core.rank.step import sum_over_ranks

    summed = sum_over_ranks({"changed": counts[phase][0], "decisions": counts[phase][1]})
    counts[phase] = [0, 0]
    return {f"routing_replay_{phase}_mismatch": summed["changed"] / summed["decisions"]} if summed["decisions"] else {}


def expert_weights(router, logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The weights ``router`` gives the experts ``index`` ((tokens, top_k)) from its ``logits``."""
    if type(router).__name__ in SIGMOID_ROUTERS:
        weights = logits.float().sigmoid().gather(1, index)
        if router.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * router.routed_scaling_factor
    weights = torch.softmax(logits, dim=-1, dtype=torch.float).gather(1, index)
    if getattr(router, "norm_topk_prob", True):  # Qwen3.5-MoE's router always renormalises
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights


def _is_router(module) -> bool:
    return type(module).__name__ in SOFTMAX_ROUTERS + SIGMOID_ROUTERS
