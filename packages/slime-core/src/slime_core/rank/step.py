"""The backend-independent half of a training rank's RL step.

Every train backend (FSDP, Megatron) runs the same step on its share of a rollout; only the
forward and backward passes differ. `RankStep` holds the rest, so the backends give the same
numbers for the same data:

1. `RankStep.tensors`: (N, R) tensors of the share: loss mask, old / reference / rollout
   log-probs, and advantages from the ``--advantage-estimator`` plugin (plus on-policy
   distillation and ``--normalize-advantages`` whitening over the data-parallel group).
   With one optimizer step per rollout (and no teacher, KL penalty in the reward or estimator
   marked ``needs_old_log_probs``, which need π_old up front) π_old is the policy being trained, so the old log-probs
   are not
   recomputed by a forward of their own: each micro-batch's forward supplies them, detached
   (`StepTensors.old_from_forward`), as TRL does with one iteration per generation;
2. per optimizer step, `RankStep.denominators` (samples and tokens of the global batch,
   counted over the data-parallel group; the samples of one rollout, see ``--rollout-id-key``,
   count once and share one token denominator) and `RankStep.plan` (micro-batches, padded
   with empty ones to the count of the rank that has the most, since every forward is a
   collective);
   `RolloutSteps` holds a rollout's steps between the rank's ``start_train`` and
   ``finish_train``, so the driver can run (and hook into) one optimizer step at a time;
3. per micro-batch, `RankStep.loss`: the ``--loss-type`` plugin's loss through
   ``compute_policy_loss`` (with the ``--tis-mode`` and ``--pg-loss-reducer`` plugins), a
   global-batch contribution; a loss marked ``needs_logits`` instead gets the micro-batch's
   full-vocabulary logits (`SampleLogits`, which the backend builds only for such a loss) and
   computes the whole contribution itself;
4. `sum_over_ranks` adds up the micro-batches' metrics of every data-parallel rank, and
   `RankStep.rollout_metrics` averages the steps; `RankStep.apply_step` decides, the same on
   every rank, whether the step's loss and gradient norm are finite, so that it may be applied
   (`nonfinite_parameters` is the weights' own check);
5. `lr_factor`: the learning-rate schedule, one value per optimizer step.

Only rank processes import this module (it imports torch and torch.distributed).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from slime_core.algorithms import (
    AdvantageInputs,
    LossDenominators,
    PolicyLossConfig,
    PolicyLossInputs,
    compute_policy_loss,
    loss_denominators,
    opd_advantages,
    whiten,
)
from slime_core.algorithms.reduce import rollout_token_totals
from slime_core.plugins import Plugins
from slime_core.rank.micro_batches import fixed_micro_batches, step_slices, token_budget_micro_batches
from slime_core.rollout_batch import RolloutBatch

if TYPE_CHECKING:
    from slime_core.config import Config

#: ``log_probs(model)``: per-sample response log-probs of the rank's share under ``model``
#: ("actor", "ref" or "teacher"), each a (response_len,) tensor.
LogProbsFn = Callable[[str], list[torch.Tensor]]


@dataclass
class SampleLogits:
    """The model's outputs for each sample of a micro-batch, for a ``needs_logits`` loss."""

    logits: list[torch.Tensor]  # per sample (total_len, V): every position's full-vocabulary logits, with gradient,
    # not divided by the temperature; position p predicts token p + 1
    tokens: list[torch.Tensor]  # per sample (total_len,) int64 token ids, prompt then response


@dataclass
class StepTensors:
    """The share's per-token inputs of the loss, right-padded to the longest response R."""

    mask: torch.Tensor  # (N, R) 1 on response tokens trained on
    old: torch.Tensor  # (N, R) log π_old(y_t) (zeros for SFT, which has no ratio)
    ref: torch.Tensor | None  # (N, R) log π_ref(y_t), with a reference model
    rollout: torch.Tensor | None  # (N, R) the engine's log-probs (not for SFT, unless an option reads them)
    advantages: torch.Tensor  # (N, R)
    old_from_forward: bool = False  # π_old is the step's own forward, detached (`loss_inputs`); ``old`` stays zeros
    rollout_ids: list[tuple] | None = None  # (N,) with --rollout-id-key: samples of one rollout share an id
    sample_tokens: torch.Tensor | None = None  # (N,) their sample-mean denominators (`share_rollout_denominators`)
    response_lengths: torch.Tensor | None = None  # (N,) int, response tokens of each sample
    total_lengths: torch.Tensor | None = None  # (N,) int, prompt + response tokens of each sample
    entropy: dict[str, list[torch.Tensor]] | None = None  # --use-rollout-entropy: "actor" / "ref" per sample

    def loss_inputs(
        self, indices: list[int], log_probs: torch.Tensor, entropy: torch.Tensor | None
    ) -> PolicyLossInputs:
        """The loss inputs of the micro-batch ``indices``, given its (B, W) log-probs (with
        gradient) and entropy; the stored rows are cut to width W and moved to its device
        without waiting for the device's queued work (a GPU keeps computing the forward while
        they travel). With ``old_from_forward`` π_old is the detached log-probs themselves."""
        width, device = log_probs.shape[1], log_probs.device
        rows = lambda t: None if t is None else t[indices, :width].to(device, non_blocking=True)  # noqa: E731
        per_sample = lambda t: None if t is None else t[indices].to(device, non_blocking=True)  # noqa: E731
        old = log_probs.detach() if self.old_from_forward else rows(self.old)
        return PolicyLossInputs(
            log_probs,
            old,
            rows(self.advantages),
            rows(self.mask),
            entropy,
            rows(self.ref),
            rows(self.rollout),
            per_sample(self.sample_tokens),
            per_sample(self.response_lengths),
            per_sample(self.total_lengths),
        )

    def share_rollout_denominators(self, slices: list[list[int]]) -> None:
        """With ``rollout_ids``, set each sample's sample-mean denominator to the trained tokens
        of its rollout's samples in the same optimizer step (``slices``: each step's indices),
        so micro-batches holding parts of a rollout divide by the whole (slime's
        ``rollout_mask_sums``). A rollout's samples are on one rank: they share a prompt group."""
        if self.rollout_ids is None:
            return
        self.sample_tokens = torch.zeros(len(self.rollout_ids))
        for indices in slices:
            ids = [self.rollout_ids[i] for i in indices]
            self.sample_tokens[indices] = rollout_token_totals(self.mask[indices], ids)


@dataclass
class RolloutSteps:
    """One rollout's optimizer steps on a rank, between ``start_train`` and ``finish_train``
    (the driver calls ``train_step`` once per step, firing the step hooks around each)."""

    batch: RolloutBatch  # the rank's share
    data: StepTensors  # its loss inputs
    slices: list[list[int]]  # the share's sample indices of each optimizer step
    history: list[dict[str, float]]  # each finished step's metrics

    @classmethod
    def plan(cls, batch: RolloutBatch, data: StepTensors, num_steps: int) -> RolloutSteps:
        """Split the share into ``num_steps`` optimizer steps; rollouts share denominators per step."""
        slices = step_slices(len(batch), num_steps)
        data.share_rollout_denominators(slices)
        return cls(batch, data, slices, [])

    def run(
        self, step: int, optimizer_step: Callable[[RolloutBatch, list[int], StepTensors], dict[str, float]]
    ) -> dict[str, float]:
        """Optimizer step ``step`` by the backend's ``optimizer_step(batch, indices, data)``; its metrics."""
        metrics = optimizer_step(self.batch, self.slices[step], self.data)
        self.history.append(metrics)
        return metrics

    def metrics(self, rank_step: RankStep) -> dict[str, float]:
        """The rollout's metrics: its steps averaged."""
        return rank_step.rollout_metrics(self.history)


class RankStep:
    """The RL math of one rank: options, advantage estimator and loss from the plugins."""

    def __init__(self, config: Config, group=None, padded_rows: bool = False, ranks_per_row: int = 1):
        """``group``: the data-parallel process group the share's statistics are summed over
        (default: every rank); ``padded_rows``: the backend gives each sample a right-padded row
        of its own, so a token budget counts rows × the longest sample (`token_budget_micro_batches`);
        ``ranks_per_row``: each row is split over this many ranks (context parallelism), so a
        micro-batch holds that many times ``--max-tokens-per-gpu``, as in slime."""
        plugins = Plugins.in_worker(config)  # the driver's -p and --custom-*-path plugins too
        self.config = config
        self.group = group or dist.group.WORLD
        self.padded_rows = padded_rows
        self.ranks_per_row = ranks_per_row
        self.estimator = plugins.registry("advantage_estimators").get(config.advantage_estimator)
        self.loss_config = PolicyLossConfig.from_config(config)
        self.loss_fn = plugins.registry("policy_losses").get(self.loss_config.loss_type)
        self.tis_fn = plugins.registry("tis_functions").get(self.loss_config.tis_mode)
        reducer = config.get("pg_loss_reducer")
        self.pg_loss_reducer = plugins.registry("pg_loss_reducers").get(reducer) if reducer else None

    @property
    def sft(self) -> bool:
        """SFT trains on -log π alone: no old log-probs, no advantages, no rollout gap."""
        return self.loss_config.loss_type == "sft_loss"

    def tensors(
        self,
        batch: RolloutBatch,
        log_probs: LogProbsFn,
        reference: bool,
        teacher: bool,
        entropy: dict[str, list[torch.Tensor]] | None = None,
    ) -> StepTensors:
        """Old / reference / teacher log-probs (through ``log_probs``) and advantages of the
        share; ``reference`` / ``teacher``: whether the rank holds that model. Teacher log-probs
        the samples carry (``batch.teacher_log_probs``) stand for a teacher model's. ``entropy``:
        the lists ``log_probs`` fills with each sample's per-token entropy (in sample order) with
        ``--use-rollout-entropy``, handed to the estimator and kept on the step's tensors (slime's
        ``rollout_data["entropy"]``)."""
        cfg = self.config
        carried = batch.teacher_log_probs
        teacher = teacher or carried is not None
        mask = pad_rows(batch.loss_masks)
        old_from_forward = not self.sft and self.on_policy(teacher)
        old = torch.zeros_like(mask) if self.sft or old_from_forward else pad_rows(log_probs("actor"))
        ref = pad_rows(log_probs("ref")) if reference else None
        advantage_inputs = AdvantageInputs(
            torch.tensor(batch.rewards, dtype=torch.float32),
            torch.tensor(batch.group_ids),
            mask,
            log_probs=None if old_from_forward else old,
            ref_log_probs=ref,
            kl_coef=cfg.kl_coef,
            kl_type=cfg.kl_loss_type,
            values=None if batch.values is None else pad_rows(batch.values),
            gamma=cfg.gamma,
            lambd=cfg.lambd,
            response_lengths=torch.tensor(batch.response_lengths),
            normalize_rewards=batch.raw_rewards is None and not cfg.disable_rewards_normalization,
            std_normalize=not cfg.disable_grpo_std_normalization,
            run_config=cfg,
            batch=batch,
            entropy=entropy if cfg.get("use_rollout_entropy") else None,
        )
        advantages, _ = self.estimator(advantage_inputs)
        if teacher:
            teacher_rows = pad_rows(carried if carried is not None else log_probs("teacher"))
            advantages = opd_advantages(advantages, old, teacher_rows, mask, cfg.opd_kl_coef)
        if cfg.normalize_advantages:
            advantages = whiten(advantages, mask, group=self.group)
        reads_rollout = not self.sft or self.loss_config.needs_rollout_log_probs
        rollout = pad_rows(batch.rollout_log_probs) if reads_rollout else None
        lengths = torch.tensor(batch.response_lengths), torch.tensor([len(t) for t in batch.tokens])
        entropy = entropy if cfg.get("use_rollout_entropy") else None
        return StepTensors(
            mask, old, ref, rollout, advantages, old_from_forward, batch.rollout_ids, None, *lengths, entropy
        )

    def on_policy(self, teacher: bool) -> bool:
        """Whether the step's own forward may stand for π_old: one optimizer step per rollout
        (the weights do not move before every sample has been through the forward once), and
        nothing needs π_old before the forward (on-policy distillation's advantages, a KL
        penalty in the reward, an estimator marked ``needs_old_log_probs``, the entropy of
        ``--use-rollout-entropy``, which slime takes in the old log-prob pass)."""
        cfg = self.config
        needed = (
            teacher
            or cfg.kl_coef
            or getattr(self.estimator, "needs_old_log_probs", False)
            or cfg.get("use_rollout_entropy")
        )
        return cfg.num_steps_per_rollout == 1 and not needed

    def plan(self, indices: list[int], batch: RolloutBatch) -> list[list[int]]:
        """Micro-batches of ``indices`` (``--use-dynamic-batch-size``: by token budget, else
        ``--micro-batch-size`` samples; one sample each in ``--true-on-policy-mode``), padded
        with empty ones to the largest count of any rank: every forward and backward is a
        collective in some group, so all ranks run the same number."""
        cfg = self.config
        if cfg.get("true_on_policy_mode"):  # each sample alone: the numbers the engine computed for it alone
            plan = fixed_micro_batches(indices, 1)
        elif cfg.use_dynamic_batch_size:
            plan = token_budget_micro_batches(
                indices, [len(t) for t in batch.tokens], cfg.max_tokens_per_gpu * self.ranks_per_row, self.padded_rows
            )
        else:
            plan = fixed_micro_batches(indices, cfg.micro_batch_size)
        count = torch.tensor(len(plan))
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        return plan + [[] for _ in range(int(count) - len(plan))]

    def denominators(self, data: StepTensors, indices: list[int]) -> LossDenominators:
        """Samples (a multi-sample rollout once) and trained tokens of one optimizer step's
        global batch (every data-parallel rank's ``indices``), the denominators of the loss
        reduction."""
        rollout_ids = None if data.rollout_ids is None else [data.rollout_ids[i] for i in indices]
        return loss_denominators(
            data.mask[indices],
            max_tokens_per_sample=self.config.rollout_max_response_len,
            group=self.group,
            rollout_ids=rollout_ids,
        )

    @property
    def needs_logits(self) -> bool:
        """Whether the ``--loss-type`` loss is computed from the micro-batch's logits (a loss
        marked ``needs_logits``): only then does the backend hand them to `loss`."""
        return getattr(self.loss_fn, "needs_logits", False)

    def loss(
        self, inputs: PolicyLossInputs, denominators: LossDenominators, logits: SampleLogits | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The micro-batch's contribution to the global-batch loss, and its metrics: a
        ``needs_logits`` loss computes all of it from ``logits``, the others go through
        ``compute_policy_loss``."""
        if self.needs_logits:
            assert logits is not None, "the backend must pass the logits of a needs_logits loss"
            return self.loss_fn(logits, inputs, denominators, self.loss_config)
        return compute_policy_loss(
            inputs, self.loss_config, denominators, self.loss_fn, self.tis_fn, self.pg_loss_reducer
        )

    def rollout_metrics(self, history: list[dict[str, float]]) -> dict[str, float]:
        """The applied steps' metrics averaged (``train_rollout_logprob_abs_diff`` among them:
        each step's gap between the trainer's and the engine's log-probs, reduced like the
        loss; every step's when all were skipped), and ``skipped_steps``: how many were skipped."""
        applied = [m for m in history if not m.get("skipped_step")] or history
        averaged = {key: sum(m[key] for m in applied) / len(applied) for key in applied[0] if key != "skipped_step"}
        return {**averaged, "skipped_steps": float(sum(m.get("skipped_step", 0.0) for m in history))}

    def rollout_entropy(self, entropy: dict[str, list[torch.Tensor]]) -> dict[str, float]:
        """With ``--use-rollout-entropy``, ``rollout_entropy`` and ``rollout_ref_entropy``: the
        entropy of π_old and of the reference model (``entropy["actor"]`` / ``["ref"]``: each
        sample's per-token values from their log-prob passes) averaged over every response token
        of the data-parallel group's samples, as slime logs them (rollout/entropy and
        rollout/ref_entropy, loss mask or not); the reference's only with a reference model."""
        if not self.config.get("use_rollout_entropy"):
            return {}
        own = {}
        for model, values in entropy.items():
            own[f"{model}_sum"] = sum(float(e.sum()) for e in values)
            own[f"{model}_tokens"] = float(sum(e.numel() for e in values))
        totals = sum_over_ranks(own, self.group)
        names = {"actor": "rollout_entropy", "ref": "rollout_ref_entropy"}
        return {
            names[model]: totals[f"{model}_sum"] / totals[f"{model}_tokens"]
            for model in entropy
            if totals[f"{model}_tokens"]
        }

    def apply_step(self, metrics: dict[str, float], grad_norm: float, loss_key: str = "loss") -> bool:
        """Whether to apply an optimizer step whose summed metrics are ``metrics`` and whose
        gradient norm is ``grad_norm``: only when the loss (``metrics[loss_key]``) and the norm
        are finite on every rank (a pipeline stage without the loss, or a rank whose share is all
        padding, takes the others' answer), so no rank steps alone. Marks ``metrics["skipped_step"]``."""
        finite = torch.tensor(int(math.isfinite(metrics.get(loss_key, 0.0)) and math.isfinite(grad_norm)))
        dist.all_reduce(finite, op=dist.ReduceOp.MIN)  # every rank, tensor and pipeline stages too
        metrics["skipped_step"] = 0.0 if finite.item() else 1.0
        return bool(finite.item())

    def lr(self, step: int) -> float:
        """``--lr`` times `lr_factor` at optimizer step ``step`` (0 = the first update)."""
        cfg = self.config
        return cfg.lr * lr_factor(
            step, cfg.lr_warmup_iters, cfg.lr_decay_style, cfg.lr_decay_iters, cfg.min_lr / cfg.lr
        )


def sum_over_ranks(metrics: dict[str, float], group=None) -> dict[str, float]:
    """Per-key sums of ``metrics`` over the ranks of ``group`` (default: every rank); a rank
    that only ran padding micro-batches contributes none."""
    gathered: list[dict[str, float]] = [{} for _ in range(dist.get_world_size(group))]
    dist.all_gather_object(gathered, metrics, group=group)
    keys = sorted({key for part in gathered for key in part})
    return {key: sum(part.get(key, 0.0) for part in gathered) for key in keys}


def lr_factor(step: int, warmup: int, style: str, decay_iters: int | None, min_ratio: float) -> float:
    """The multiple of ``--lr`` at optimizer step ``step`` (0 = the first update).

    Warmup: (step + 1) / warmup for the first ``warmup`` steps. Then ``constant``: 1;
    ``linear``/``cosine``: from 1 down to ``min_ratio`` over ``decay_iters`` steps, then
    ``min_ratio``.
    """
    if step < warmup:
        return (step + 1) / warmup
    if style == "constant" or not decay_iters:
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, decay_iters - warmup))
    if style == "linear":
        shape = 1.0 - progress
    elif style == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise ValueError(f"unknown --lr-decay-style {style!r}; use constant, linear or cosine")
    return min_ratio + (1.0 - min_ratio) * shape


def ref_update_due(config: Config, rollout_id: int) -> bool:
    """Whether the reference model becomes a copy of the actor once rollout ``rollout_id`` has
    trained: after every ``--ref-update-interval``-th rollout, counted from 0 as in slime."""
    interval = config.get("ref_update_interval")
    return bool(interval) and (rollout_id + 1) % interval == 0


def memory_gib(device: torch.device) -> dict[str, float]:
    """Memory of this rank, in GiB: allocated and peak device memory on a GPU; resident and
    peak resident memory of the process on a CPU."""
    if device.type == "cuda":
        return {
            "allocated_gib": torch.cuda.memory_allocated() / 2**30,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
        }
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    return {"rss_gib": int(status["VmRSS"].split()[0]) / 2**20, "peak_rss_gib": int(status["VmHWM"].split()[0]) / 2**20}


def nonfinite_parameters(named_parameters) -> list[str]:
    """The names of the parameters whose values (this rank's shard of each) hold a NaN or an
    infinity. One float32-accumulated sum per parameter, no copy: a NaN or an infinity makes it
    non-finite, and finite weights cannot sum past float32's range."""
    named = [(name, param.to_local() if hasattr(param, "to_local") else param) for name, param in named_parameters]
    named = [(name, tensor) for name, tensor in named if tensor.numel()]
    if not named:
        return []
    with torch.no_grad():
        sums = [tensor.detach().sum(dtype=torch.float32) for _, tensor in named]
        finite = torch.isfinite(torch.stack([value.to(sums[0].device) for value in sums])).tolist()  # one sync
    return [name for (name, _), ok in zip(named, finite) if not ok]


def log_prob_temperature(config: Config, model: str) -> float:
    """The temperature ``model``'s log-probs are taken at: the policy's (actor, reference) at
    ``--rollout-temperature``, the distribution the engine samples from; a distillation teacher's
    at 1, as SGLang scores input tokens whatever the request's temperature (slime's OPD reward
    sends the rollout's temperature to the teacher engine, and gets the plain log-softmax back)."""
    return 1.0 if model == "teacher" else config.rollout_temperature


def check_prompts(tokens: list[list[int]], response_lengths: list[int]) -> None:
    """Every sample needs a prompt token (the first response token is predicted from it)
    and a response token."""
    for seq, response_length in zip(tokens, response_lengths):
        if not 0 < response_length < len(seq):
            raise ValueError(
                f"a sample has {len(seq)} tokens and a response of {response_length}: it needs at least one prompt "
                "token and one response token to be trained on"
            )


def pad_rows(rows: list[torch.Tensor | list], device=None, value: float = 0.0) -> torch.Tensor:
    """Right-pad per-sample 1-D tensors (or lists) into a (B, T) float32 tensor."""
    tensors = [r if isinstance(r, torch.Tensor) else torch.tensor(r, dtype=torch.float32) for r in rows]
    width = max((t.numel() for t in tensors), default=0)
    out = []
    for t in tensors:
        t = t.to(device=device if device is not None else t.device, dtype=torch.float32)
        out.append(torch.nn.functional.pad(t, (0, width - t.numel()), value=value))
    return torch.stack(out)
