"""The train-backend contract the loop drives, and the Ray actor group that runs a backend.

A train backend registers (``slime_register_train_backends``) a *rank class*: one instance
runs in each training rank's process (a Ray actor) and implements `TrainRank`. The loop
never touches a rank directly; it calls `TrainGroup`, which starts the actors, splits each
rollout per data-parallel rank (`dp_rank_indices`) and calls every rank together (ranks
run collectives, so they must all be called). Megatron and FSDP implement the same
protocol, so ``--train-backend`` is the only thing that changes between them.
"""

from __future__ import annotations

import os

from typing import Any, Iterator, Protocol

from slime_core.ports import free_port
from slime_core.rollout_batch import RolloutBatch, dp_rank_indices
from slime_core.weight_bucket import WeightBucket

#: Which model a log-prob pass uses: the policy being trained, the frozen reference
#: (KL loss / KL penalty) or the distillation teacher.
LOG_PROB_MODELS = ("actor", "ref", "teacher")


class TrainRank(Protocol):
    """One training rank of a backend. Every method is called on every rank at once."""

    def __init__(self, config, rank: int, world_size: int, master_addr: str, master_port: int):
        """Join the process group; load nothing yet. ``config`` is the run's `Config`."""

    def init(self) -> dict[str, Any]:
        """Load the model from ``--hf-checkpoint``, or resume from ``--load`` when it holds a
        checkpoint. Returns ``{"rollout_id": next rollout to run, "weight_version": int}``."""

    def compute_log_probs(self, batch: RolloutBatch, model: str = "actor") -> list[list[float]]:
        """Per-sample response log-probs under ``model`` (one of `LOG_PROB_MODELS`), with the
        rollout temperature; ``batch`` is this rank's share."""

    def train(self, rollout_id: int, batch: RolloutBatch) -> dict[str, float]:
        """Compute log-probs and advantages for this rank's share, then run every optimizer
        step of the rollout. Returns global-batch metrics (equal on every rank)."""

    def compute_values(self, batch: RolloutBatch) -> list[list[float]]:
        """Critics only: per-sample values of the response tokens (PPO's V_old)."""

    def weight_buckets(self, bucket_bytes: int) -> int:
        """Plan the export of the weights in buckets of about ``bucket_bytes``; returns how
        many buckets `export_bucket` serves."""

    def export_bucket(self, index: int) -> WeightBucket | None:
        """Bucket ``index`` on rank 0: its ``(hf_name, full tensor)`` pairs packed by
        ``WeightBucket.pack`` (None elsewhere)."""

    def weight_version(self) -> int:
        """How many optimizer updates the weights have seen (0 = the loaded checkpoint)."""

    def save(self, rollout_id: int) -> str:
        """Write a checkpoint under ``--save`` atomically; returns its directory."""

    def save_hf(self, path: str) -> None:
        """Write a Hugging Face model directory (config, weights, tokenizer) to ``path``."""

    def offload(self) -> None:
        """Move parameters, gradients and optimizer state to CPU memory (colocated mode)."""

    def onload(self) -> None:
        """Bring them back to the training device."""

    def memory(self) -> dict[str, float]:
        """Memory in use, in GiB (device memory on GPU, resident memory on CPU)."""


class TrainGroup:
    """The Ray actors of one train backend (one per rank), called together."""

    def __init__(self, rank_class, config, num_ranks: int, num_gpus_per_rank: float = 0, actor_options=None):
        """``actor_options(rank) -> dict`` (e.g. `slime_core.placement.Placement.train_options`)
        overrides the Ray options of each rank's actor."""
        import ray

        port = free_port()
        actor = ray.remote(num_cpus=0, num_gpus=num_gpus_per_rank)(rank_class)
        self.num_ranks = num_ranks
        threads = {} if num_gpus_per_rank else cpu_thread_options(max(1, (os.cpu_count() or 1) // num_ranks))
        self.ranks = [actor.options(**{**threads, **(actor_options(rank) if actor_options else {})})
                      .remote(config, rank, num_ranks, "127.0.0.1", port) for rank in range(num_ranks)]

    def call(self, method: str, *args) -> list[Any]:
        """``method(*args)`` on every rank; the results in rank order."""
        import ray

        return ray.get([getattr(rank, method).remote(*args) for rank in self.ranks])

    def init(self) -> dict[str, Any]:
        return self.call("init")[0]

    def compute_log_probs(self, batch: RolloutBatch, model: str = "actor") -> list[list[float]]:
        """Log-probs of every sample of ``batch``, in the batch's order."""
        return self._per_sample("compute_log_probs", batch, model)

    def compute_values(self, batch: RolloutBatch) -> list[list[float]]:
        """A critic's values of every sample of ``batch``, in the batch's order."""
        return self._per_sample("compute_values", batch)

    def _per_sample(self, method: str, batch: RolloutBatch, *args) -> list[list[float]]:
        """Each rank computes ``method`` on its share; the answers put back in batch order."""
        import ray

        shares = dp_rank_indices(batch, self.num_ranks)
        calls = [getattr(rank, method).remote(batch.select(share), *args) for rank, share in zip(self.ranks, shares)]
        results = ray.get(calls)
        out: list[list[float]] = [[] for _ in range(len(batch))]
        for share, result in zip(shares, results):
            for index, log_probs in zip(share, result):
                out[index] = log_probs
        return out

    def train(self, rollout_id: int, batch: RolloutBatch) -> dict[str, float]:
        """One rollout's optimizer steps on every rank; the global-batch metrics."""
        import ray

        shares = dp_rank_indices(batch, self.num_ranks)
        return ray.get([rank.train.remote(rollout_id, batch.select(share)) for rank, share in zip(self.ranks, shares)])[0]

    def export_weights(self, bucket_bytes: int) -> Iterator[WeightBucket]:
        """The weights in Hugging Face names and shapes, one bucket at a time (iterate a
        bucket for its ``(name, tensor)`` pairs)."""
        for index in range(self.call("weight_buckets", bucket_bytes)[0]):
            yield self.call("export_bucket", index)[0]

    def shutdown(self) -> None:
        import ray

        for rank in self.ranks:
            ray.kill(rank)
        self.ranks = []


def cpu_thread_options(threads: int) -> dict[str, Any]:
    """Ray actor options that start a CPU rank with ``threads`` OpenMP threads. Ray starts a
    worker with ``OMP_NUM_THREADS`` set to its CPU count (1 here), and a process started so
    runs its kernels slower even after ``torch.set_num_threads`` (a tiny GRPO step on 2 cores:
    0.30 s instead of 0.22 s); ranks read the variable for their thread count."""
    return {"runtime_env": {"env_vars": {"OMP_NUM_THREADS": str(threads)}}}
