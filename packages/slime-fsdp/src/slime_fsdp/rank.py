"""`FSDPTrainRank`: one rank of the FSDP2 train backend (see ``slime_core.train_backend``).

Reference model: its weights are kept in CPU memory as this rank's shards and swapped into
the one sharded model for the reference log-prob pass, then swapped back, so the device
never holds two policies. The distillation teacher is a separate, unsharded model kept on
the CPU and moved to the device only for its forward passes.
"""

from __future__ import annotations

import os
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING

import torch

from slime_core.algorithms import batch_invariant
from slime_core.checkpoint.directory import is_megatron_checkpoint, resume_checkpoint, starts_from_ref_load
from slime_core.multimodal.vision_inputs import without_placeholders
from slime_core.rank.optimizer_state import reset_optimizer_states
from slime_core.rank.process_group import init_default_group
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
from slime_fsdp import checkpoint, inputs, lora, weights
from slime_fsdp.model import enable_batch_invariant_kernels, load_model, load_tokenizer, shard
from slime_fsdp.optimizer import build_optimizer
from slime_fsdp.routing_replay import RoutingReplay
from slime_fsdp.vision import VisionInputs, is_vision_language

if TYPE_CHECKING:
    from slime_core.config.config import Config


class FSDPTrainRank:
    """One training rank: a shard of the policy, its optimizer, and the RL step."""

    vision: VisionInputs | None = None  # a vision-language model's image inputs (set by `init`)
    role = "actor"  # in the profilers' file names

    def __init__(self, config: Config, rank: int, world_size: int, master_addr: str, master_port: int):
        from torch.distributed.device_mesh import init_device_mesh

        self.config, self.rank, self.world_size = config, rank, world_size
        cuda = torch.cuda.is_available()
        self.device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        if not cuda:  # ranks share the CPU cores: their share from the placement, else an equal one
            torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or max(1, (os.cpu_count() or 1) // world_size)))
        if not cuda and config.true_on_policy_mode:  # the engine's thread count for the same numbers
            torch.set_num_threads(batch_invariant.THREADS)
        # On GPUs, CUDA tensors go over nccl and the small CPU-side reductions (micro-batch
        # counts, loss denominators, metrics) over gloo, so neither has to move devices.
        backend = "cpu:gloo,cuda:nccl" if cuda else "gloo"
        init_default_group(
            backend, master_addr, master_port, rank, world_size, getattr(config, "distributed_timeout_minutes", None)
        )
        self.mesh = init_device_mesh(self.device.type, (world_size,))
        self.step = RankStep(config)
        self.profiler = TrainProfiler(config, rank, self.device, self.role)  # records memory from here on, as slime's
        self.version = 0
        self.rollout_id = 0  # the rollout being trained on (set by start_train)
        self._buckets: list[list[str]] = []
        self._adapter_only = False  # the planned export is LoRA's adapter alone (`weight_buckets`)
        self.lora = False  # LoRA adapters on the policy (`slime_fsdp.lora`); set by `init`, never on a critic

    # ---------------------------------------------------------------- setup and resume

    def init(self) -> dict:
        cfg = self.config
        torch.manual_seed(cfg.seed)
        if cfg.true_on_policy_mode and self.device.type == "cuda":
            enable_batch_invariant_kernels()
        model = load_model(
            cfg.hf_checkpoint,
            gradient_checkpointing=cfg.gradient_checkpointing,
            # --true-on-policy-mode: the CPU engine's attention unless given (slime_sglang.plugin checks it)
            attn_implementation=cfg.attn_implementation or ("sdpa" if cfg.true_on_policy_mode else None),
            compile_layers=cfg.fsdp_torch_compile,
        )
        self.tokenizer = load_tokenizer(cfg.hf_checkpoint, model)
        self.attn_implementation = model.config._attn_implementation
        self.lora = lora.enabled(cfg)
        if self.lora:
            lora.apply_lora(model, cfg)
        freeze_by_name(model.named_parameters(), cfg)
        self.routing = RoutingReplay(model, cfg.use_rollout_routing_replay) if cfg.use_routing_replay else None
        self.vision = VisionInputs(cfg.hf_checkpoint, model.config) if is_vision_language(cfg.hf_checkpoint) else None
        self.model = shard(model.to(self.device), self.mesh, cfg.bf16, cfg.fsdp_cpu_offload)
        if starts_from_ref_load(cfg):
            self._set_weights(cfg.ref_load)
        self.optimizer, self.scheduler = build_optimizer(self.model, cfg)
        self.reference = self._reference_shards()
        self.teacher = load_model(cfg.opd_teacher_load).eval() if cfg.opd_teacher_load else None
        resumed = {"rollout_id": self._resume(), "weight_version": self.version}
        self.profiler.started()
        return resumed

    def _reference_shards(self) -> dict[str, torch.Tensor] | None:
        """The reference policy's shards on CPU: the starting weights, or ``--ref-load``."""
        cfg = self.config
        if not (cfg.use_kl_loss or cfg.kl_coef):
            return None
        if not cfg.ref_load or starts_from_ref_load(cfg):
            return weights.snapshot_local_shards(self.model)
        with weights.swapped_weights(self.model, weights.snapshot_local_shards(self.model)):
            self._set_weights(cfg.ref_load)
            return weights.snapshot_local_shards(self.model)

    def _set_weights(self, directory: str) -> None:
        """The sharded model's weights from ``directory``: a Hugging Face model, read by every
        rank, or a Megatron checkpoint, converted on rank 0 (`slime_fsdp.megatron_weights`)
        and sent to the others."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        # with LoRA: the base weights under their injected names; the adapter stays as it is
        names = (lambda state: lora.injected_names(state, self.model)) if self.lora else (lambda state: state)
        if not is_megatron_checkpoint(directory):
            full = names(load_model(directory).state_dict())
            set_model_state_dict(self.model, full, options=StateDictOptions(full_state_dict=True, strict=not self.lora))
            return
        from slime_fsdp.megatron_weights import hf_state_dict

        full = names(hf_state_dict(directory, self.config.hf_checkpoint, self.config)) if self.rank == 0 else {}
        set_model_state_dict(
            self.model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        )

    def _resume(self) -> int:
        """Restore from ``--load`` if it holds a checkpoint (the latest, or ``--ckpt-step``'s); the next rollout id."""
        path = resume_checkpoint(self.config)
        if path is None:
            return 0
        extra = checkpoint.load_checkpoint(path, self.model, self.optimizer, adapter_only=self.lora)
        self.scheduler.load_state_dict(extra["scheduler"])
        torch.set_rng_state(extra["rng"])
        self.version = extra["weight_version"]
        return extra["rollout_id"] + 1

    # ---------------------------------------------------------------- log-probs

    @torch.no_grad()
    def compute_log_probs(self, batch: RolloutBatch, model: str = "actor") -> list[list[float]]:
        return [lp.tolist() for lp in self._log_probs(batch, model)]

    def _log_probs(
        self, batch: RolloutBatch, model: str, replay: bool = False, entropy: list[torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        """Per sample, the response log-probs under ``model``; ``replay``: the π_old pass of
        `start_train`, with routing replay (`_routing_of`); ``entropy``: a list that receives
        each sample's per-token entropy of ``model`` from the same forward (`--use-rollout-entropy`)."""
        swap = weights.swapped_weights(self.model, self.reference) if model == "ref" else nullcontext()
        if model == "ref" and self.reference is None:
            raise ValueError("reference log-probs need a reference model: set --use-kl-loss or --kl-coef")
        out: list[torch.Tensor | None] = [None] * len(batch)
        entropies: list[torch.Tensor] = [torch.zeros(0)] * len(batch)  # in sample order, as `out`
        self.profiler.begin("train_log_probs")
        with (
            torch.no_grad(),
            swap,
            _eval_mode(self.model),
            self._teacher_on_device() if model == "teacher" else nullcontext(),
        ):
            for indices in self._plan(list(range(len(batch))), batch):
                micro = self._inputs(batch, indices)
                net = self.teacher if model == "teacher" else self.model
                with self._routing_of(micro, indices) if replay and model == "actor" else nullcontext():
                    logits = self._logits(net, micro)
                temperature = log_prob_temperature(self.config, model)
                for index, lp in zip(indices, inputs.response_log_probs(logits, micro, temperature)):
                    out[index] = lp.float().cpu()
                if entropy is not None and indices:
                    for index, h in zip(indices, inputs.response_entropy(logits, micro, temperature)):
                        entropies[index] = h.float().cpu()
                self.profiler.tick("train_log_probs")
        self.profiler.end("train_log_probs")
        if entropy is not None:
            entropy.extend(entropies)
        return out

    def _routing_of(self, micro: inputs.MicroBatch, indices: list[int]):
        """The routing replay of the actor's π_old pass (`slime_fsdp.routing_replay`); the
        reference and teacher models route by themselves."""
        return nullcontext() if self.routing is None else self.routing.log_probs(micro, indices)

    def _teacher_on_device(self):
        if self.teacher is None:
            raise ValueError("teacher log-probs need a teacher model: set --opd-teacher-load DIR")
        return _on_device(self.teacher, self.device)

    # ---------------------------------------------------------------- training

    def start_train(self, rollout_id: int, batch: RolloutBatch) -> int:
        """Advantages for this rank's share; returns the ``--num-steps-per-rollout`` steps to run.
        With ``--reset-optimizer-states`` the optimizer starts the rollout afresh."""
        self.rollout_id = rollout_id
        self.model.train()
        if self.config.reset_optimizer_states:
            reset_optimizer_states([self.optimizer])
        if self.routing is not None:
            self.routing.start(batch)
        entropy: dict[str, list[torch.Tensor]] = {"actor": [], "ref": []}  # `RankStep.rollout_entropy`
        wanted = self.config.get("use_rollout_entropy")
        data = self.step.tensors(
            batch,
            lambda model: self._log_probs(batch, model, replay=True, entropy=entropy.get(model) if wanted else None),
            reference=self.reference is not None,
            teacher=self.teacher is not None,
            entropy=entropy,
        )
        self.steps = RolloutSteps.plan(batch, data, self.config.num_steps_per_rollout)
        routing = self.routing.metrics("logprob") if self.routing is not None else {}
        self.logprob_metrics = {**routing, **self.step.rollout_entropy(entropy)}  # of the log-prob passes
        self.profiler.begin("train_actor")
        return len(self.steps.slices)

    def train_step(self, step: int) -> dict[str, float]:
        """Optimizer step ``step`` of the rollout; its global-batch metrics."""
        return self.steps.run(step, self._optimizer_step)

    def finish_train(self) -> dict[str, float]:
        """The rollout's metrics (its steps averaged); the weights are one version newer, and
        every ``--ref-update-interval`` rollouts the reference model becomes a copy of them."""
        steps, self.steps = self.steps, None
        self.version += 1
        self.profiler.end("train_actor")
        if self.reference is not None and ref_update_due(self.config, self.rollout_id):
            self.reference = weights.snapshot_local_shards(self.model)
        self.profiler.finish_rollout(self.rollout_id)
        return {**steps.metrics(self.step), **self.logprob_metrics}

    def _optimizer_step(self, batch: RolloutBatch, indices: list[int], data: StepTensors) -> dict[str, float]:
        denominators = self.step.denominators(data, indices)
        totals: dict[str, float] = {}
        for micro_indices in self._plan(indices, batch):
            for key, value in self._backward(batch, micro_indices, data, denominators).items():
                totals[key] = totals.get(key, 0.0) + value
            self.profiler.tick("train_actor")
        metrics = sum_over_ranks(totals)
        metrics.update(lr=self.scheduler.get_last_lr()[0])
        if self.routing is not None:
            metrics.update(self.routing.metrics("update"))
        metrics["grad_norm"] = self._apply_gradients(metrics)
        return metrics

    def _apply_gradients(self, metrics: dict[str, float], loss_key: str = "loss") -> float:
        """Clip the accumulated gradients to ``--clip-grad``, step the optimizer and the LR
        schedule unless the step is skipped for a non-finite loss or norm (`RankStep.apply_step`
        marks ``metrics``), clear the gradients; returns the norm before clipping."""
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_grad)
        grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
        if self.step.apply_step(metrics, grad_norm, loss_key):
            self.optimizer.step()
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm

    def _backward(self, batch, indices, data, denominators) -> dict[str, float]:
        """Forward and backward of one micro-batch; its contribution to the step's metrics."""
        micro = self._inputs(batch, indices)
        with self.routing.update(micro, indices) if self.routing is not None else nullcontext():
            return self._forward_backward(micro, indices, data, denominators)

    def _forward_backward(self, micro, indices, data, denominators) -> dict[str, float]:
        logits = self._logits(self.model, micro)
        if not indices:  # padding micro-batch: keep this rank in step with the others' collectives
            (logits.sum() * 0.0).backward()
            return {}
        temperature = self.config.rollout_temperature
        log_probs = pad_rows(inputs.response_log_probs(logits, micro, temperature))
        entropy = None
        if self.step.loss_config.entropy_coef:
            entropy = pad_rows(inputs.response_entropy(logits, micro, temperature))
        logits_for_loss = inputs.sample_logits(logits, micro) if self.step.needs_logits else None
        loss, metrics = self.step.loss(data.loss_inputs(indices, log_probs, entropy), denominators, logits_for_loss)
        (loss * self.world_size).backward()  # FSDP averages gradients over ranks; the loss is a sum
        return metrics

    # ---------------------------------------------------------------- micro-batches

    def _logits(self, net, micro: inputs.MicroBatch) -> torch.Tensor:
        """(rows, T, V) logits of ``net`` on ``micro``; a vision-language model's without its image
        placeholders, as its engine samples (`slime_core.multimodal.vision_inputs.without_placeholders`)."""
        logits = net(**micro.model_inputs()).logits
        return logits if self.vision is None else without_placeholders(logits, self.model.config)

    def _plan(self, indices: list[int], batch: RolloutBatch) -> list[list[int]]:
        """The micro-batches of ``indices`` (`RankStep.plan`); the critic's too."""
        return self.step.plan(indices, batch)

    def _inputs(self, batch: RolloutBatch, indices: list[int]) -> inputs.MicroBatch:
        pad = self.tokenizer.pad_token_id or 0
        if not indices:
            return inputs.packed([[pad, pad]], [1], self.device, self.attn_implementation)
        tokens = [batch.tokens[i] for i in indices]
        response_lengths = [batch.response_lengths[i] for i in indices]
        check_prompts(tokens, response_lengths)
        nuclei = batch.nuclei(indices)
        if self.config.true_on_policy_mode:  # one sample per micro-batch (`RankStep.plan`)
            return inputs.alone(tokens[0], response_lengths[0], self.device)
        if self.config.use_dynamic_batch_size:
            micro = inputs.packed(tokens, response_lengths, self.device, self.attn_implementation, nuclei)
        else:
            micro = inputs.padded(tokens, response_lengths, self.device, pad, nuclei)
        if self.vision is not None:
            images = [batch.images[i] for i in indices] if batch.images else [None] * len(indices)
            videos = [batch.videos[i] for i in indices] if batch.videos else None
            self.vision.add(micro, self.model, tokens, [batch.loss_masks[i] for i in indices], images, videos)
        return micro

    # ---------------------------------------------------------------- weights and checkpoints

    def weight_version(self) -> int:
        return self.version

    def weight_buckets(self, bucket_bytes: int, adapter_only: bool = False) -> int:
        """Plan the export (`TrainBackend.weight_buckets`); ``adapter_only``: LoRA's adapter alone."""
        if adapter_only and not self.lora:
            raise ValueError("an adapter-only weight export needs LoRA (--lora-rank > 0)")
        self._adapter_only = adapter_only
        unit = lora.export_unit if self.lora else None
        self._buckets = weights.plan_buckets(self.model, bucket_bytes, unit, lora.is_adapter if adapter_only else None)
        return len(self._buckets)

    def nonfinite_weights(self) -> list[str]:
        """The parameters whose shard on this rank holds a NaN or an infinity."""
        return nonfinite_parameters(self.model.named_parameters())

    def export_bucket(self, index: int) -> WeightBucket | None:
        """Bucket ``index`` on rank 0 (None elsewhere); with LoRA the adapter alone
        (`lora.adapter_bucket`) or its adapted weights merged (`lora.merge_bucket`)."""
        bucket = weights.gather_bucket(self.model, self._buckets[index], keep=self.rank == 0)
        if bucket is None:
            return None
        if not self.lora:
            return WeightBucket.pack(bucket)
        export = lora.adapter_bucket if self._adapter_only else lora.merge_bucket
        return WeightBucket.pack(export(bucket, lora.scaling(self.config)))

    def save(self, rollout_id: int) -> str:
        """A resumable checkpoint under ``--save``, and with ``--save-hf DIR`` a Hugging Face
        directory ``DIR/iter_XXXXXXX`` beside it."""
        extra = {
            "scheduler": self.scheduler.state_dict(),
            "rng": torch.get_rng_state(),
            "weight_version": self.version,
            "rollout_id": rollout_id,
        }
        path = checkpoint.save_checkpoint(
            self.config.save, rollout_id, self.model, self.optimizer, extra, adapter_only=self.lora
        )
        if self.config.save_hf:
            self.save_hf(os.path.join(self.config.save_hf, f"iter_{rollout_id:07d}"))
        return path

    def save_hf(self, path: str) -> None:
        """A Hugging Face model directory (a vision-language model's with its processor); with LoRA
        a peft adapter directory (`lora.save_adapter`)."""
        if self.lora:
            lora.save_adapter(path, self.model, self.config, self.tokenizer)
        else:
            checkpoint.save_hf(path, self.model, self.tokenizer if self.vision is None else self.vision.processor)

    def offload(self) -> None:
        """Parameters and optimizer state to CPU memory, and the freed device memory back to
        the driver (the caching allocator would otherwise keep it from colocated engines)."""
        self.model.to("cpu")
        weights.move_optimizer_state(self.optimizer, "cpu")
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def onload(self) -> None:
        self.model.to(self.device)
        weights.move_optimizer_state(self.optimizer, self.device)

    def memory(self) -> dict[str, float]:
        return memory_gib(self.device)


@contextmanager
def _eval_mode(model):
    """Log-probs in eval mode (no LoRA dropout: they must equal the engines'), then back to the mode it was in."""
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


@contextmanager
def _on_device(model, device):
    """Move ``model`` to ``device`` for the block, then back to the CPU."""
    model.to(device)
    try:
        yield
    finally:
        model.to("cpu")
