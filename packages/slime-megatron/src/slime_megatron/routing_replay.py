"""MoE routing replay on the Megatron backend (`slime_core.routing_replay` says what R2 and R3 are),
with megatron-core's own mechanism: the actor's ``TransformerConfig.moe_enable_routing_replay``
gives every router a ``RouterReplay``, which records the router's top-k (``RECORD``) or routes by
given top-k instead of its own (``REPLAY_FORWARD``).

Each sample's routing is a (tokens, num_layers, top_k) tensor of expert ids: with R3 the engine's
(`RolloutBatch.routed_experts`, a row for every token but the last), with R2 the trainer's own,
recorded in the π_old pass. Before each micro-batch's forward every decoder router of the rank
gets its layer's ids in the order the router sees the tokens (`router_positions`): megatron's
activations are sequence first, [columns, rows], so token ``n`` of a micro-batch of B rows is
column ``n // B`` of row ``n % B``; the columns are the rank's context-parallel chunks
(`MicroBatch.columns`), and with sequence parallelism each tensor-parallel rank's routers see
its slice of them. A pipeline stage's routers are its layers' (``router.layer_number``); multi-
token prediction layers route by themselves. Padding, and a sample's last token, whose output
scores no token, route to experts 0..top_k-1. R2's recording is merged over the ranks that split
a micro-batch's tokens (tensor-parallel with sequence parallelism, context-parallel), since an
update's micro-batches may cut the samples' tokens otherwise.

Two metrics say what the replay changed (FSDP's): ``routing_replay_logprob_mismatch`` (R3: in the
π_old pass, the share of routing decisions, a token at a MoE layer, where the trainer's router
would have picked other experts than the engine did) and ``routing_replay_update_mismatch`` (in
the updates, the share where the router would now pick other experts than the replayed ones).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.distributed as dist

from slime_core.moe_routers import replay_mismatch
from slime_core.rollout_batch import RolloutBatch
from slime_megatron.inputs import MicroBatch


class RoutingReplay:
    """One rank's routing replay: its decoder routers and each sample's routing."""

    def __init__(self, chunks, rollout: bool, parallel):
        from megatron.core.transformer.moe.router import TopKRouter

        from slime_megatron.models.weights import unwrap

        decoders = [unwrap(chunk).decoder for chunk in chunks]
        self.routers = [m for d in decoders for m in d.modules() if isinstance(m, TopKRouter) and m.router_replay]
        config = unwrap(chunks[0]).config  # a stage may hold dense layers only: no routers
        self.top_k, self.num_layers = config.moe_router_topk, config.num_layers
        self.rollout = rollout  # R3: the engine's routing; else R2: the trainer's, recorded
        sp = config.sequence_parallel
        self.split = (parallel.get_tensor_model_parallel_rank(), parallel.get_tensor_model_parallel_world_size())
        self.split = self.split if sp else (0, 1)
        self.groups = [parallel.get_tensor_model_parallel_group()] if sp else []
        if parallel.get_context_parallel_world_size() > 1:
            self.groups.append(parallel.get_context_parallel_group())
        self.routes: dict[int, torch.Tensor] = {}  # sample index -> (tokens, num_layers, top_k)
        self.counts = {"logprob": [0, 0], "update": [0, 0]}  # changed, decisions
        self._counting: tuple[str, torch.Tensor] | None = None  # phase, (N,) real tokens of the forward
        for router in self.routers:
            router.register_forward_hook(self._count)

    def start(self, batch: RolloutBatch) -> None:
        """A new rollout's samples: R3 takes the engine's routing of them."""
        self.routes, self.counts = {}, {"logprob": [0, 0], "update": [0, 0]}
        if not self.rollout:
            return
        if batch.routed_experts is None:
            raise ValueError(
                "--use-rollout-routing-replay: the train data carries no routed experts; a --train-data-converter "
                "must fill RolloutBatch.routed_experts (from Sample.rollout_routed_experts)"
            )
        k = self.top_k
        self.routes = {
            i: torch.tensor(rows, dtype=torch.long).view(len(rows), -1, k)
            for i, rows in enumerate(batch.routed_experts)
        }

    def log_probs(self, micro: MicroBatch):
        """Around the π_old forward of ``micro``: R3 replays, R2 records."""
        return self._replayed(micro, "logprob") if self.rollout else self._recorded(micro)

    def recorded(self) -> dict[str, float]:
        """After the log-prob passes: R3's π_old mismatch metric; R2's recording merged over the
        ranks that split the samples' tokens."""
        if self.rollout:
            return self.metrics("logprob")
        if not self.routes:
            return {}
        order = sorted(self.routes)
        flat = torch.cat([self.routes[i].reshape(-1) for i in order])
        for group in self.groups:
            dist.all_reduce(flat, op=dist.ReduceOp.MAX, group=group)
        parts = flat.split([self.routes[i].numel() for i in order])
        self.routes = {i: part.view(self.routes[i].shape) for i, part in zip(order, parts)}
        return {}

    def update(self, micro: MicroBatch):
        """Around an update's forward of ``micro``: replays its samples' routing (R2 without a π_old
        pass, `RankStep.on_policy`, has none: the weights are π_old's)."""
        if not micro.indices or not all(i in self.routes for i in micro.indices):
            return None
        return self._replayed(micro, "update")

    def metrics(self, phase: str) -> dict[str, float]:
        """The share of ``phase``'s routing decisions the replay changed, over every rank; empty without any."""
        return replay_mismatch(self.counts, phase)

    @contextmanager
    def _replayed(self, micro: MicroBatch, phase: str):
        from megatron.core.transformer.moe.router_replay import RouterReplayAction

        positions = router_positions(micro, *self.split)
        experts, real = self._layout(micro)
        self._counting = (phase, real[positions])
        for router in self.routers:
            router.router_replay.set_target_indices(experts[positions, router.layer_number - 1])
            router.router_replay.set_router_replay_action(RouterReplayAction.REPLAY_FORWARD)
        try:
            yield
        finally:
            self._counting = None
            self._clear()

    @contextmanager
    def _recorded(self, micro: MicroBatch):
        from megatron.core.transformer.moe.router_replay import RouterReplayAction

        for router in self.routers:
            router.router_replay.set_router_replay_action(RouterReplayAction.RECORD)
        try:
            yield
            self._keep(micro, router_positions(micro, *self.split))
        finally:
            self._clear()

    def _keep(self, micro: MicroBatch, positions: torch.Tensor) -> None:
        """The routing the routers recorded in ``micro``'s forward, into its samples' (-1: not
        seen by this rank's routers)."""
        rows, width = micro.input_ids.shape
        seen = torch.full((rows * width, self.num_layers, self.top_k), -1, dtype=torch.long)
        for router in self.routers:
            picks = router.router_replay.get_recorded_indices()
            if picks is not None:  # None: a router of a model chunk this forward did not run
                seen[positions, router.layer_number - 1] = picks.cpu().long()
        for row, (i, length) in enumerate(zip(micro.indices, micro.lengths)):
            mine = seen[row * width : row * width + length]
            self.routes[i] = mine if i not in self.routes else torch.maximum(self.routes[i], mine)

    def _clear(self) -> None:
        for router in self.routers:
            router.router_replay.clear_indices()
            router.router_replay.clear_router_replay_action()

    def _count(self, router, args, output) -> None:
        """A replaying router's forward hook: how many of its real tokens its own top-k would
        have sent to other experts than the replayed ones."""
        if self._counting is None:
            return
        phase, real = self._counting
        own = own_routing_map(router, args[0])
        changed = (own != output[1]).any(-1).cpu() & real
        self.counts[phase][0] += int(changed.sum())
        self.counts[phase][1] += int(real.sum())

    def _layout(self, micro: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The (B·W, num_layers, top_k) experts of the micro-batch's positions, and the (B·W,)
        mask of the positions that have a sample's routing."""
        rows, width = micro.input_ids.shape
        experts = torch.arange(self.top_k).expand(rows * width, self.num_layers, self.top_k).clone()
        real = torch.zeros(rows * width, dtype=torch.bool)
        for row, i in enumerate(micro.indices):
            routes = self.routes[i][: micro.lengths[row]]
            first = row * width
            experts[first : first + len(routes)] = routes
            real[first : first + len(routes)] = True
        return experts, real


def router_positions(micro: MicroBatch, rank: int, size: int) -> torch.Tensor:
    """(N,) the flat positions into ``micro``'s (B·W) whole rows of the N tokens a router of
    sequence-parallel rank ``rank`` of ``size`` sees, in its order: sequence first (megatron's
    [s, b] activations), over the context-parallel rank's columns, this rank's slice of them."""
    rows, width = micro.input_ids.shape
    columns = micro.columns.cpu() if micro.columns is not None else torch.arange(width)
    grid = columns.view(-1, 1) + torch.arange(rows).view(1, -1) * width  # (W_cp, B)
    share = grid.shape[0] // size
    return grid[rank * share : (rank + 1) * share].reshape(-1)


def own_routing_map(router, hidden: torch.Tensor) -> torch.Tensor:
    """(N, experts) bool: the experts ``router`` itself picks for its input ``hidden``, by
    megatron-core's top-k (no replay), for the mismatch metrics."""
    from megatron.core.transformer.moe.moe_utils import topk_routing_with_score_function

    c = router.config
    with torch.no_grad():
        logits = router.gating(hidden).view(-1, c.num_moe_experts)
        _, routing_map = topk_routing_with_score_function(
            logits,
            router.topk,
            use_pre_softmax=c.moe_router_pre_softmax,
            num_groups=c.moe_router_num_groups,
            group_topk=c.moe_router_group_topk,
            scaling_factor=c.moe_router_topk_scaling_factor,
            score_function=router.score_function,
            expert_bias=router.expert_bias,
            fused=c.moe_router_fusion,
        )
    return routing_map
