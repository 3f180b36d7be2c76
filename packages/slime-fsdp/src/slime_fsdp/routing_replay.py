"""MoE routing replay on the FSDP backend (`slime_core.routing_replay` says what R2 and R3 are).

Each sample's routing is a (tokens, num_layers, top_k) tensor of expert ids: with R3 the engine's
(`RolloutBatch.routed_experts`, a row for every token but the last), with R2 the trainer's own,
recorded in the π_old pass. A micro-batch's forward replays them at the positions its samples
occupy (`inputs.MicroBatch.spans`); padding, and a sample's last token, whose output scores no
token, route to experts 0..top_k-1.

Two metrics say what the replay changed: ``routing_replay_logprob_mismatch`` (R3: in the π_old
pass, the share of routing decisions, a token at a MoE layer, where the trainer's router would
have picked other experts than the engine did) and ``routing_replay_update_mismatch`` (in the
updates, the share where the router would now pick other experts than the replayed ones).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch

from slime_core.moe_routers import RouterTaps, replay_mismatch
from slime_core.rollout_batch import RolloutBatch
from slime_fsdp.inputs import MicroBatch


class RoutingReplay:
    """One rank's routing replay: the taps on its model's routers and each sample's routing."""

    def __init__(self, model, rollout: bool):
        self.taps = RouterTaps(model)
        self.rollout = rollout  # R3: the engine's routing; else R2: the trainer's, recorded
        self.routes: dict[int, torch.Tensor] = {}  # sample index -> (tokens, num_layers, top_k)
        self.counts = {"logprob": [0, 0], "update": [0, 0]}  # changed, decisions

    def start(self, batch: RolloutBatch) -> None:
        """A new rollout's share: R3 takes the engine's routing of its samples."""
        self.routes, self.counts = {}, {"logprob": [0, 0], "update": [0, 0]}
        if self.rollout and batch.routed_experts is None:
            raise ValueError(
                "--use-rollout-routing-replay: the train data carries no routed experts; a --train-data-converter "
                "must fill RolloutBatch.routed_experts (from Sample.rollout_routed_experts)"
            )
        if self.rollout:
            k = self.taps.top_k
            self.routes = {
                i: torch.tensor(rows, dtype=torch.long).view(len(rows), -1, k)
                for i, rows in enumerate(batch.routed_experts)
            }

    @contextmanager
    def log_probs(self, micro: MicroBatch, indices: list[int]):
        """Around the π_old forward of the samples ``indices``: R3 replays, R2 records."""
        if self.rollout:
            with self._replayed(micro, indices, "logprob"):
                yield
            return
        with self.taps.recording() as recorded:
            yield
        every = self.taps.rows(recorded)
        for i, (row, start, length, _) in zip(indices, micro.spans):
            first = row * micro.input_ids.shape[1] + start
            self.routes[i] = every[first : first + length]

    def update(self, micro: MicroBatch, indices: list[int]):
        """Around an update's forward and backward (which may run the forward again: gradient
        checkpointing) of the samples ``indices``: replays their routing (R2 without a π_old pass,
        `RankStep.on_policy`, has none: the weights are π_old's)."""
        if not indices or not all(i in self.routes for i in indices):
            return nullcontext()
        return self._replayed(micro, indices, "update")

    def metrics(self, phase: str) -> dict[str, float]:
        """The share of ``phase``'s routing decisions the replay changed, over every rank; empty without any."""
        return replay_mismatch(self.counts, phase)

    @contextmanager
    def _replayed(self, micro: MicroBatch, indices: list[int], phase: str):
        experts, real = self._layout(micro, indices)
        with self.taps.replaying(experts) as own:
            yield
        for layer, picks in own.items():
            mine, replayed = picks.cpu().sort(-1).values[real], experts[:, layer].sort(-1).values[real]
            self.counts[phase][0] += int((mine != replayed).any(-1).sum())
            self.counts[phase][1] += int(real.sum())

    def _layout(self, micro: MicroBatch, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The (rows·T, num_layers, top_k) experts of the micro-batch's positions, and the (rows·T,)
        mask of the positions that have a sample's routing."""
        rows, width = micro.input_ids.shape
        taps = self.taps
        experts = torch.arange(taps.top_k).expand(rows * width, taps.num_layers, taps.top_k).clone()
        real = torch.zeros(rows * width, dtype=torch.bool)
        for i, (row, start, length, _) in zip(indices, micro.spans):
            routes = self.routes[i][:length]
            first = row * width + start
            experts[first : first + len(routes)] = routes
            real[first : first + len(routes)] = True
        return experts, real
