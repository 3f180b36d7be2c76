"""`FSDPCriticRank`: the PPO critic, the same train-backend contract with a value head.

The critic is the policy's transformer body (loaded from ``--critic-load``, default
``--hf-checkpoint``) with a zero-initialised linear head giving one value per position.
The value of response token t is read where the policy's logits for t are read: at the
position before it (the state the token was chosen in).

Per rollout: `compute_values` gives the old values V_old the actor's GAE needs (the loop
puts them in ``RolloutBatch.values``); `train` computes returns = GAE advantages + V_old
from the rewards and fits the values with the clipped value loss (``--value-clip``).
A vision-language critic sees each sample's images as the policy does (`slime_fsdp.vision`:
the same packing, pixels and multimodal positions), so its values depend on the picture.
The critic's returns carry no KL penalty, so ``--kl-coef`` must be 0 with a critic (use
``--use-kl-loss`` to keep the policy near the reference instead). Its checkpoints live in their
own place under ``--save`` (``DIR/critic``: the driver gives its ranks that directory,
`slime_core.checkpoint.directory.role_config`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from slime_core.algorithms import AdvantageInputs, loss_denominators, ppo_advantages, reduce_loss, value_loss
from slime_core.rank.micro_batches import step_slices
from slime_core.rank.optimizer_state import reset_optimizer_states
from slime_core.rank.step import pad_rows, sum_over_ranks
from slime_core.rank.trainable import freeze_by_name
from slime_core.rollout_batch import RolloutBatch
from slime_fsdp import inputs
from slime_fsdp.model import load_model, load_tokenizer, shard
from slime_fsdp.optimizer import build_optimizer
from slime_fsdp.plugin import critic_kl_problem
from slime_fsdp.rank import FSDPTrainRank
from slime_fsdp.vision import VisionInputs, is_vision_language


class ValueModel(torch.nn.Module):
    """A causal LM's transformer body plus a linear value head: (rows, T) values."""

    def __init__(self, causal_lm):
        super().__init__()
        self.body = causal_lm.base_model
        self.config = causal_lm.config
        self._no_split_modules = causal_lm._no_split_modules
        self.value_head = torch.nn.Linear(self.config.get_text_config().hidden_size, 1)  # a VLM: its language model's
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids, position_ids=None, attention_mask=None, **attention) -> torch.Tensor:
        """``attention``: the packed-row keywords the policy gets too (``cu_seq_lens_q``, ...,
        `slime_fsdp.inputs.MicroBatch.model_inputs`), passed to the body's attention."""
        hidden = self.body(
            input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask, **attention
        ).last_hidden_state
        return self.value_head(hidden).squeeze(-1)

    @property
    def model(self):
        """The body, where a vision-language model's multimodal positions are computed
        (`slime_core.multimodal.vision_inputs.rope_positions` asks ``model.model``)."""
        return self.body


class FSDPCriticRank(FSDPTrainRank):
    """One rank of the critic; checkpoints, offload and micro-batching as the policy's."""

    role = "critic"

    def init(self) -> dict:
        cfg = self.config
        problem = critic_kl_problem(cfg)  # the config checks refuse it first
        if problem:
            raise ValueError(problem)
        torch.manual_seed(cfg.seed)
        causal_lm = load_model(
            cfg.critic_load or cfg.hf_checkpoint,
            gradient_checkpointing=cfg.gradient_checkpointing,
            attn_implementation=cfg.attn_implementation,
            compile_layers=cfg.fsdp_torch_compile,
        )
        self.tokenizer = load_tokenizer(cfg.critic_load or cfg.hf_checkpoint, causal_lm)
        self.attn_implementation = causal_lm.config._attn_implementation
        path = cfg.critic_load or cfg.hf_checkpoint
        self.vision = VisionInputs(path, causal_lm.config) if is_vision_language(path) else None
        value_model = ValueModel(causal_lm)
        freeze_by_name(value_model.named_parameters(), cfg)  # slime freezes the critic's by the same patterns
        self.model = shard(value_model.to(self.device), self.mesh, cfg.bf16, cfg.fsdp_cpu_offload)
        self.optimizer, self.scheduler = build_optimizer(self.model, cfg, lr=cfg.critic_lr or cfg.lr)
        resumed = {"rollout_id": self._resume(), "weight_version": self.version}
        self.profiler.started()
        return resumed

    @torch.no_grad()
    def compute_values(self, batch: RolloutBatch) -> list[list[float]]:
        """Per-sample values of the response tokens (this rank's share)."""
        out: list[list[float]] = [[] for _ in range(len(batch))]
        for indices in self._plan(list(range(len(batch))), batch):
            micro = self._inputs(batch, indices)
            values = [v for v, _ in inputs.response_slices(self.model(**micro.model_inputs()), micro)]
            for index, value in zip(indices, values):
                out[index] = value.float().cpu().tolist()
        return out

    def train(self, rollout_id: int, batch: RolloutBatch) -> dict[str, float]:
        cfg = self.config
        if cfg.reset_optimizer_states:
            reset_optimizer_states([self.optimizer])
        mask = pad_rows(batch.loss_masks)
        old = pad_rows(self.compute_values(batch))
        advantage_inputs = AdvantageInputs(
            torch.tensor(batch.rewards, dtype=torch.float32),
            torch.tensor(batch.group_ids),
            mask,
            values=old,
            response_lengths=torch.tensor(batch.response_lengths),
            gamma=cfg.gamma,
            lambd=cfg.lambd,
        )
        _, returns = ppo_advantages(advantage_inputs)
        history = [
            self._value_step(batch, indices, mask, old, returns)
            for indices in step_slices(len(batch), cfg.num_steps_per_rollout)
        ]
        self.version += 1
        self.profiler.finish_rollout(rollout_id)
        return {key: sum(m[key] for m in history) / len(history) for key in history[0]}

    def _value_step(self, batch, indices, mask, old, returns) -> dict[str, float]:
        denominators = loss_denominators(mask[indices], group=dist.group.WORLD)
        totals: dict[str, float] = {}
        for micro_indices in self._plan(indices, batch):
            micro = self._inputs(batch, micro_indices)
            values = self.model(**micro.model_inputs())
            if not micro_indices:
                (values.sum() * 0.0).backward()
                continue
            predicted = pad_rows([v for v, _ in inputs.response_slices(values, micro)])
            width = predicted.shape[1]

            def rows(t, micro_indices=micro_indices, width=width):
                return t[micro_indices, :width]

            per_token, clipfrac = value_loss(predicted, rows(old), rows(returns), self.config.value_clip)
            loss = reduce_loss(per_token, rows(mask), denominators)
            (loss * self.world_size).backward()
            for key, value in (
                ("value_loss", loss),
                ("value_clipfrac", reduce_loss(clipfrac, rows(mask), denominators)),
            ):
                totals[key] = totals.get(key, 0.0) + value.item()
        metrics = sum_over_ranks(totals)
        metrics["critic_grad_norm"] = self._apply_gradients(metrics, loss_key="value_loss")
        return metrics
