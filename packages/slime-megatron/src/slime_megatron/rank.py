"""`MegatronTrainRank`: one rank of the Megatron-core train backend (see ``slime_core.train_backend``).

The RL step is the FSDP backend's (``slime_core.rank.step``); what is Megatron's here is how
the passes run:

- every forward and backward goes through Megatron's forward-backward schedule
  (``get_forward_backward_func``: plain gradient accumulation, or 1F1B over pipeline
  stages), and the model-grads finalisation (data-parallel all-reduce) runs once per step;
- log-probs and entropy come from the vocabulary-parallel logits of the rank's tensor-parallel
  slice (`slime_megatron.logprobs`), in the training forward and in the forward-only passes
  before the update (`slime_megatron.response_log_probs`);
- ranks of one model replica (tensor/pipeline/context parallel) gather their shares and
  train on the union (`slime_megatron.shares`); metrics and denominators are summed over the
  data-parallel group;
- with context parallelism each rank runs its two chunks of every row, and the per-token
  log-probs and entropy are assembled over the context-parallel group before the loss
  (`slime_megatron.context`), so every context-parallel rank computes the whole loss;
- MoE layers whose token dispatcher all-gathers over ranks with other samples (expert
  parallelism on CPU) get micro-batches of one shape on every rank (`inputs.same_shapes`);
- multi-token prediction layers (``--mtp-num-layers``) stay out of the log-probs; with
  ``--enable-mtp-training`` a training forward also returns their logits, whose loss
  (`slime_megatron.models.mtp_loss`) is added to the policy's, else they are frozen.

Beside it: `slime_megatron.schedule` (the forward-backward schedule), `.optimizer` (DDP and
the optimizer), `.inputs` (padded micro-batches), `.swap` (the reference weights),
`.export` (HF weights for the engines and ``--save-hf``), `.offload` (colocated mode),
`.chunks` (the model chunks of virtual pipeline stages, or the one chunk),
`.routing_replay` (MoE routing replay, R2 and R3, around the forwards of the π_old pass and the updates),
`.scoring_models` (the reference weights and the distillation teacher), `.trainable` (frozen parameters),
`.hooks` (the user's functions called at fixed points here: after the parallel groups are
built, before each log-prob pass, on the rollout's train data, before each optimizer step,
after a disk weight update is written).

The loss each micro-batch returns is its global-batch contribution (``compute_policy_loss``),
so its gradient is scaled by the micro-batch count and the data-parallel size, which the
schedule (mean over micro-batches) and DDP (mean over replicas) divide by again. With context
parallelism DDP averages over the data × context-parallel ranks, and megatron's schedule
multiplies the loss by the CP size to make up for it.

Reference model: its weights are kept in CPU memory as this rank's parameter shards and
swapped into the model for the reference pass; the distillation teacher is a second GPTModel
kept on the device (`slime_megatron.scoring_models`).
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from slime_core.checkpoint.directory import megatron_checkpoint, resume_checkpoint, starts_from_ref_load
from slime_core.rank.optimizer_state import reset_optimizer_states
from slime_core.rank.profiler import TrainProfiler
from slime_core.rank.step import (
    RankStep,
    RolloutSteps,
    StepTensors,
    check_prompts,
    log_prob_temperature,
    memory_gib,
    nonfinite_parameters,
    pad_rows,
    ref_update_due,
    sum_over_ranks,
)
from slime_core.rank.trainable import freeze_by_name
from slime_core.rank.weight_bucket import WeightBucket
from slime_core.rollout_batch import RolloutBatch
from slime_megatron import export, inputs, offload, schedule, scoring_models, swap
from slime_megatron.chunks import build_chunks
from slime_megatron.hooks import RankHooks
from slime_megatron.layout import check_layout
from slime_megatron.models.mtp_loss import mtp_losses
from slime_megatron.optimizer import build_optimizer, set_lr, torch_optimizers, wrap
from slime_megatron.parallel import init_parallel, replica_group
from slime_megatron.response_log_probs import ResponseScorer, log_prob_pass
from slime_megatron.routing_replay import RoutingReplay
from slime_megatron.shares import gather_shares
from slime_megatron.trainable import check_layers_frozen_alike, train_mtp_or_freeze

if TYPE_CHECKING:
    from slime_core.config.config import Config


class MegatronTrainRank:
    """One training rank: a tensor/pipeline shard of the policy in a data-parallel replica."""

    def __init__(self, config: Config, rank: int, world_size: int, master_addr: str, master_port: int):
        from slime_megatron.cpu_compat import import_megatron

        import_megatron()  # CPU mode's import (nothing on CUDA): before any other of megatron
        from megatron.core import parallel_state

        self.config, self.rank, self.world_size = config, rank, world_size
        init_parallel(config, rank, world_size, master_addr, master_port)
        self.hooks = RankHooks(config, rank)
        self.hooks.fire("megatron_init_hook")
        cuda = torch.cuda.is_available()
        self.device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        self.parallel = parallel_state
        self.profiler = TrainProfiler(config, rank, self.device)  # records memory from here on, as slime's
        self.step = RankStep(
            config,
            group=parallel_state.get_data_parallel_group(),
            padded_rows=True,
            ranks_per_row=parallel_state.get_context_parallel_world_size(),
        )
        self.cp_group, self.cp_size = parallel_state.get_context_parallel_group(), self.step.ranks_per_row
        self.version = 0  # rollouts trained (the weight version the engines see)
        self.rollout_id = 0  # the rollout being trained on (set by start_train)
        self.updates = 0  # optimizer steps taken (the learning-rate schedule's step)
        self._offloaded: offload.Offloaded | None = None
        self._buckets: list[list[tuple[str, torch.Tensor]]] = []

    # ---------------------------------------------------------------- setup and resume

    def init(self) -> dict:
        from transformers import AutoConfig, AutoTokenizer

        from slime_megatron.models import load_hf_weights
        from slime_megatron.torch_dist import load_weights

        cfg = self.config
        self.hf_config = AutoConfig.from_pretrained(cfg.hf_checkpoint)
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.hf_checkpoint)
        check_layout(self.hf_config, cfg, f"--hf-checkpoint {cfg.hf_checkpoint}")  # the config checks' rules
        modules = build_chunks(self.hf_config, cfg, mtp_layers=cfg.get("mtp_num_layers") or 0)
        for module in modules:
            train_mtp_or_freeze(module, bool(cfg.get("enable_mtp_training")))
        named = [pair for module in modules for pair in module.named_parameters()]
        freeze_by_name(named, cfg, whole_model=self.parallel.get_pipeline_model_parallel_world_size() == 1)
        if cfg.save:
            check_layers_frozen_alike(named)
        if starts_from_ref_load(cfg):
            load_weights(megatron_checkpoint(cfg.ref_load), modules)
        else:
            load_hf_weights(modules, cfg.hf_checkpoint, self.hf_config)
        self.model = wrap(modules, cfg)
        self.optimizer = build_optimizer(self.model, cfg)
        rollout_routing = bool(cfg.use_rollout_routing_replay)
        self.routing = RoutingReplay(self.model, rollout_routing, self.parallel) if cfg.use_routing_replay else None
        self.reference = scoring_models.reference_weights(self.model.module, cfg, self.hf_config)
        self.teacher = scoring_models.teacher(cfg, self.hf_config.vocab_size)
        tp_group = self.parallel.get_tensor_model_parallel_group()
        self.scorer = ResponseScorer(tp_group, self.hf_config.vocab_size, self.cp_group, self.cp_size)
        self.same_shapes = any(
            inputs.tokens_gathered_across_replicas(net.config) for net in (modules, self.teacher) if net
        )
        resumed = {
            "rollout_id": self._resume() if cfg.load else 0,
            "weight_version": self.version,
            "data_parallel_rank": self.parallel.get_data_parallel_rank(),  # its replica (`replica_group`)
        }
        self.profiler.started()
        return resumed

    def _resume(self) -> int:
        """Restore from ``--load`` if it holds a checkpoint (the latest, or ``--ckpt-step``'s); the next rollout id."""
        from megatron.core import tensor_parallel

        from slime_megatron.checkpoint import WRITTEN_BY, load_checkpoint

        path = resume_checkpoint(self.config, WRITTEN_BY)
        if path is None:
            return 0
        extra = load_checkpoint(path, self.model, self.optimizer)
        if "rollout_id" not in extra:  # from `slime convert hf-to-megatron`: starting weights, no training state
            return 0
        torch.set_rng_state(extra["rng"])
        tensor_parallel.get_cuda_rng_tracker().set_states(extra["parallel_rng"])
        self.version, self.updates = extra["weight_version"], extra["updates"]
        return extra["rollout_id"] + 1

    # ---------------------------------------------------------------- log-probs

    def compute_log_probs(self, share: RolloutBatch, model: str = "actor") -> list[list[float]]:
        batch, own = gather_shares(share, replica_group())
        log_probs = self._log_probs(batch, model)
        return [log_probs[i].tolist() for i in own]

    def _log_probs(
        self, batch: RolloutBatch, model: str, entropy: list[torch.Tensor] | None = None, replay: bool = False
    ) -> list[torch.Tensor]:
        """Per-sample response log-probs of the replica's ``batch`` under ``model``; ``entropy``:
        a list that receives each sample's per-token entropy of ``model`` from the same forward
        (``--use-rollout-entropy``); ``replay``: the π_old pass of `start_train`, with routing
        replay (`slime_megatron.routing_replay`)."""
        if model == "ref" and self.reference is None:
            raise ValueError("reference log-probs need a reference model: set --use-kl-loss or --kl-coef")
        if model == "teacher" and self.teacher is None:
            raise ValueError("teacher log-probs need a teacher model: set --opd-teacher-load DIR")
        net = self.teacher if model == "teacher" else self.model
        micros = self._micro_batches(batch, list(range(len(batch))))
        reference = swap.swapped(self.model.module, self.reference) if model == "ref" else nullcontext()
        self.profiler.begin("train_log_probs")
        with torch.no_grad(), reference:
            self.hooks.fire("megatron_before_log_probs_hook", list(net), model)
            temperature = log_prob_temperature(self.config, model)
            around = self.routing.log_probs if replay and model == "actor" and self.routing else None
            tick = partial(self.profiler.tick, "train_log_probs")
            out, entropies = log_prob_pass(
                net, micros, len(batch), self.scorer, temperature, entropy is not None, on_forward=tick, around=around
            )
        self.profiler.end("train_log_probs")
        if entropy is not None:
            entropy.extend(h for h in entropies if h is not None)
        return out

    # ---------------------------------------------------------------- training

    def start_train(self, rollout_id: int, share: RolloutBatch) -> int:
        """Advantages for the replica's samples; returns the ``--num-steps-per-rollout`` steps to run.
        With ``--reset-optimizer-states`` the optimizer starts the rollout afresh."""
        self.rollout_id = rollout_id
        batch, _ = gather_shares(share, replica_group())
        self.model.train()
        if self.config.reset_optimizer_states:
            reset_optimizer_states(torch_optimizers(self.optimizer))
        entropy: dict[str, list[torch.Tensor]] = {"actor": [], "ref": []}  # `RankStep.rollout_entropy`
        wanted = self.config.get("use_rollout_entropy")
        if self.routing is not None:
            self.routing.start(batch)
        data = self.step.tensors(
            batch,
            lambda model: self._log_probs(batch, model, entropy=entropy.get(model) if wanted else None, replay=True),
            reference=self.reference is not None,
            teacher=self.teacher is not None,
            entropy=entropy,
        )
        routing = self.routing.recorded() if self.routing is not None else {}
        self.logprob_metrics = {**routing, **self.step.rollout_entropy(entropy)}  # of the log-prob passes
        self.hooks.fire("megatron_train_data_hook", rollout_id, batch, data)
        self.steps = RolloutSteps.plan(batch, data, self.config.num_steps_per_rollout)
        self.profiler.begin("train_actor")
        return len(self.steps.slices)

    def train_step(self, step: int) -> dict[str, float]:
        """Optimizer step ``step`` of the rollout; its global-batch metrics."""
        return self.steps.run(step, partial(self._optimizer_step, step))

    def finish_train(self) -> dict[str, float]:
        """The rollout's metrics (its steps averaged); the weights are one version newer, and
        every ``--ref-update-interval`` rollouts the reference model becomes a copy of them."""
        steps, self.steps = self.steps, None
        self.version += 1
        self.profiler.end("train_actor")
        if self.reference is not None and ref_update_due(self.config, self.rollout_id):
            self.reference = swap.snapshot(self.model.module)
        self.profiler.finish_rollout(self.rollout_id)
        return {**steps.metrics(self.step), **self.logprob_metrics}

    def _optimizer_step(
        self, step: int, batch: RolloutBatch, indices: list[int], data: StepTensors
    ) -> dict[str, float]:
        """Forward and backward of every micro-batch through the schedule, then one update (at
        the learning rate set before the step's hook, which may change it)."""
        denominators = self.step.denominators(data, indices)
        micros = self._micro_batches(batch, indices)
        scale = len(micros) * self.parallel.get_data_parallel_world_size()
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        set_lr(self.optimizer, self.step.lr(self.updates))
        self.hooks.fire("megatron_before_train_step_hook", self.rollout_id, step, list(self.model), self.optimizer)
        loss_fn = partial(self._loss, data=data, denominators=denominators, scale=scale)
        tick = partial(self.profiler.tick, "train_actor")
        around = self.routing.update if self.routing is not None else None
        results = schedule.run(self.model, micros, loss_fn, forward_only=False, on_forward=tick, around=around)
        totals: dict[str, float] = {}
        for result in results:
            for key, value in result.items():
                totals[key] = totals.get(key, 0.0) + value
        metrics = sum_over_ranks(totals, self.step.group)
        if self.routing is not None:
            metrics.update(self.routing.metrics("update"))
        metrics["lr"] = self.optimizer.param_groups[0]["lr"]
        metrics["grad_norm"] = self._apply_gradients(metrics)
        return metrics

    def _apply_gradients(self, metrics: dict[str, float]) -> float:
        """One update, clipped to ``--clip-grad``, unless the step's loss or gradient norm is
        not finite (`RankStep.apply_step` decides on every rank and marks ``metrics``): the norm
        is computed before the update, which computes it again as it clips (THUDM slime's way
        of skipping such steps); the norm before clipping."""
        self.optimizer.prepare_grads()
        grad_norm = float(self.optimizer.get_grad_norm())
        if self.step.apply_step(metrics, grad_norm):
            self.optimizer.step()
            self.updates += 1
        return grad_norm

    def _loss(self, micro: inputs.MicroBatch, logits: torch.Tensor, data: StepTensors, denominators, scale: int):
        """The schedule's loss function: this micro-batch's loss (scaled, see the module
        docstring) and its metrics."""
        if not micro.indices:  # padding micro-batch: in step with the others' collectives, no gradient
            return logits.sum() * 0.0, {}
        logits, *depths = logits.split(micro.input_ids.shape[1], dim=1)  # MTP depths with --enable-mtp-training
        with_entropy = bool(self.step.loss_config.entropy_coef)
        log_probs, entropy = self.scorer.log_probs(logits, micro, self.config.rollout_temperature, with_entropy)
        entropy = pad_rows(entropy) if with_entropy else None
        logits_for_loss = self.scorer.sample_logits(logits, micro) if self.step.needs_logits else None
        loss, metrics = self.step.loss(
            data.loss_inputs(micro.indices, pad_rows(log_probs), entropy), denominators, logits_for_loss
        )
        if not depths:
            return loss * scale, metrics
        mtp = mtp_losses(
            depths,
            micro.input_ids,
            micro.lengths,
            micro.response_lengths,
            data.mask[micro.indices],
            self.parallel.get_tensor_model_parallel_group(),
            self.hf_config.vocab_size,
        ).sum()
        metrics["mtp_loss"] = mtp.item() / scale  # summed over micro-batches and replicas: their mean
        # not scaled: the schedule and DDP average it over micro-batches and replicas (see the module docstring)
        return loss * scale + self.config.mtp_loss_scaling_factor / len(depths) * mtp, metrics

    def _micro_batches(self, batch: RolloutBatch, indices: list[int]) -> list[inputs.MicroBatch]:
        """The micro-batches of ``indices`` (planned by `RankStep.plan`) as model inputs."""
        pad = self.tokenizer.pad_token_id or 0
        cp = self.cp_size
        multiple = self.parallel.get_tensor_model_parallel_world_size() * (2 * cp if cp > 1 else 1)
        micros = []
        plan = self.step.plan(indices, batch)
        for micro in plan + [[]] * (schedule.interleaving_count(len(plan)) - len(plan)):
            if not micro:
                micros.append(inputs.padding_micro_batch(pad, multiple, self.device))
                continue
            tokens, response_lengths = [batch.tokens[i] for i in micro], [batch.response_lengths[i] for i in micro]
            check_prompts(tokens, response_lengths)
            micros.append(
                inputs.padded(micro, tokens, response_lengths, pad, multiple, self.device, batch.nuclei(micro))
            )
        interleaved = self.parallel.get_virtual_pipeline_model_parallel_world_size() is not None
        if self.same_shapes or interleaved:
            micros = inputs.same_shapes(micros, dist.group.WORLD, pad, all_alike=interleaved)
        return [inputs.split_over_context(m, self.parallel.get_context_parallel_rank(), cp) for m in micros]

    # ---------------------------------------------------------------- weights and checkpoints

    def weight_version(self) -> int:
        return self.version

    def weight_buckets(self, bucket_bytes: int) -> int:
        """Gather the weights in Hugging Face names and shapes on rank 0 (every rank takes
        part) and cut them into buckets of about ``bucket_bytes``."""
        pairs = export.hf_weights(self.model, self.hf_config, with_mtp=self._engines_take_mtp()) or []
        self._buckets = export.buckets(pairs, bucket_bytes)
        count = [len(self._buckets)]
        dist.broadcast_object_list(count, src=0)
        self._buckets = self._buckets or [[] for _ in range(count[0])]
        return count[0]

    def nonfinite_weights(self) -> list[str]:
        """The parameters whose shard on this rank holds a NaN or an infinity, named as in their
        model chunk (with ``chunk N:`` before them when the rank holds several virtual stages)."""
        if len(self.model) == 1:
            return nonfinite_parameters(self.model[0].named_parameters())
        return [
            f"chunk {index}: {name}"
            for index, chunk in enumerate(self.model)
            for name in nonfinite_parameters(chunk.named_parameters())
        ]

    def export_bucket(self, index: int) -> WeightBucket | None:
        bucket, self._buckets[index] = self._buckets[index], []  # served once: free it
        return WeightBucket.pack(bucket) if self.rank == 0 else None

    def save(self, rollout_id: int) -> str:
        """A resumable checkpoint under ``--save`` (model, optimizer, RNG, counters), and
        with ``--save-hf DIR`` a Hugging Face directory ``DIR/iter_XXXXXXX`` beside it."""
        from megatron.core import tensor_parallel

        from slime_megatron.checkpoint import save_checkpoint

        extra = {
            "rng": torch.get_rng_state(),
            "parallel_rng": tensor_parallel.get_cuda_rng_tracker().get_states(),
            "weight_version": self.version,
            "updates": self.updates,
            "rollout_id": rollout_id,
        }
        path = save_checkpoint(self.config.save, rollout_id, self.model, self.optimizer, extra)
        if self.config.save_hf:
            export.save_hf(
                os.path.join(self.config.save_hf, f"iter_{rollout_id:07d}"), self.model, self.hf_config, self.tokenizer
            )
        return str(path)

    def save_hf(self, path: str) -> None:
        """The weights as a Hugging Face directory for the engines (``--update-weight-transport
        disk``), then ``--megatron-weights-written-hook`` on every rank before any engine reads it."""
        export.save_hf(path, self.model, self.hf_config, self.tokenizer, with_mtp=self._engines_take_mtp())
        self.hooks.fire("megatron_weights_written_hook", path)
        dist.barrier()

    def _engines_take_mtp(self) -> bool:
        """Whether weight updates carry the MTP layers: when they change (--enable-mtp-training)
        and the engines draft tokens with them (SGLang's speculative decoding, slime's use of
        them); otherwise the engines keep the checkpoint's, which they never run or which are
        the same. ``--save-hf`` checkpoints always hold them."""
        return bool(self.config.get("enable_mtp_training") and self.config.sglang.get("speculative_algorithm"))

    def offload(self) -> None:
        """Parameters, gradients and optimizer state to CPU memory (`slime_megatron.offload`)."""
        self._offloaded = offload.offload(self.model, self.optimizer)

    def onload(self) -> None:
        offload.onload(self.model, self.optimizer, self._offloaded, self.device)
        self._offloaded = None

    def memory(self) -> dict[str, float]:
        return memory_gib(self.device)
