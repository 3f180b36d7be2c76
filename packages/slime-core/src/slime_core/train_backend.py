"""The train-backend contract the loop drives, and the Ray actor group that runs a backend.

A train backend registers (``slime_register_train_backends``) a *rank class*: one instance
runs in each training rank's process (a Ray actor) and implements `TrainRank`. The loop
never touches a rank directly; it calls `TrainGroup`, which starts the actors, splits each
rollout per data-parallel rank (`dp_rank_indices`; the ranks of one model replica, e.g.
Megatron's tensor-parallel ranks, count as one) and calls every rank together (ranks run
collectives, so they must all be called). Megatron and FSDP implement the same
protocol, so ``--train-backend`` is the only thing that changes between them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Protocol

from slime_core.cluster.network import LOOPBACK
from slime_core.faults.nonfinite import NonFiniteError
from slime_core.faults.run_fault import RunFault
from slime_core.rank.process_group import SERVED_STORE_ENV, serve_store
from slime_core.rank.weight_bucket import WeightBucket
from slime_core.rollout_batch import RolloutBatch, dp_rank_indices

if TYPE_CHECKING:
    from slime_core.config import Config

#: Which model a log-prob pass uses: the policy being trained, the frozen reference
#: (KL loss / KL penalty) or the distillation teacher.
LOG_PROB_MODELS = ("actor", "ref", "teacher")
#: After a rank's call failed, how long to wait for Ray to report a rank's death (`TrainGroup._lost_rank`).
LOST_RANK_WAIT_S = 10.0


class TrainRank(Protocol):
    """One training rank of a backend: what the loop calls, on every rank at once. A backend's
    registered rank class is a `RankClass` (its constructor joins the process group and loads
    nothing yet); its ranks may offer more (slime's report ``memory()``: GiB in use, for tests)."""

    def init(self) -> dict[str, Any]:
        """Load the model from ``--hf-checkpoint``, or resume from ``--load`` when it holds a
        checkpoint. Returns ``{"rollout_id": next rollout to run, "weight_version": int}``."""

    def compute_log_probs(self, batch: RolloutBatch, model: str = "actor") -> list[list[float]]:
        """Per-sample response log-probs under ``model`` (one of `LOG_PROB_MODELS`), with the
        rollout temperature; ``batch`` is this rank's share."""

    def start_train(self, rollout_id: int, batch: RolloutBatch) -> int:
        """Compute log-probs and advantages for this rank's share of rollout ``rollout_id``;
        returns how many optimizer steps it makes (``--num-steps-per-rollout``)."""

    def train_step(self, step: int) -> dict[str, float]:
        """Optimizer step ``step`` (0-based) of the rollout started; its global-batch metrics
        (equal on every rank)."""

    def finish_train(self) -> dict[str, float]:
        """End the rollout's training (the weights are one version newer); the rollout's
        global-batch metrics (its steps averaged, equal on every rank)."""

    def weight_buckets(self, bucket_bytes: int) -> int:
        """Plan the export of the weights in buckets of about ``bucket_bytes``; returns how
        many buckets `export_bucket` serves. A backend with LoRA also takes ``adapter_only``
        (passed as True only to a LoRA policy, for engines that load adapters): the adapter's
        tensors alone, not the merged weights (slime-fsdp's ``FSDPTrainRank``)."""

    def export_bucket(self, index: int) -> WeightBucket | None:
        """Bucket ``index`` on rank 0: its ``(hf_name, full tensor)`` pairs packed by
        ``WeightBucket.pack`` (None elsewhere)."""

    def weight_version(self) -> int:
        """How many optimizer updates the weights have seen (0 = the loaded checkpoint)."""

    def nonfinite_weights(self) -> list[str]:
        """The names of this rank's parameters (its shards of them) that hold a NaN or an
        infinity (`slime_core.rank.step.nonfinite_parameters`); the loop asks before every
        weight update and checkpoint."""

    def save(self, rollout_id: int) -> str:
        """Write a checkpoint under ``--save`` atomically; returns its directory."""

    def save_hf(self, path: str) -> None:
        """Write a Hugging Face model directory (config, weights, tokenizer) to ``path``."""

    def offload(self) -> None:
        """Move parameters, gradients and optimizer state to CPU memory (colocated mode)."""

    def onload(self) -> None:
        """Bring them back to the training device."""


class CriticRank(TrainRank, Protocol):
    """A rank of a PPO critic (``slime_register_critics``): a train rank that also values."""

    def compute_values(self, batch: RolloutBatch) -> list[list[float]]:
        """Per-sample values of the response tokens (PPO's V_old)."""


#: A registered rank class: ``rank_class(config, rank, world_size, master_addr, master_port)``
#: joins the process group (``config``: the run's `Config`) and loads nothing yet.
RankClass = Callable[["Config", int, int, str, int], TrainRank]


class TrainGroup:
    """The ranks of one train backend, each a Ray actor, called together. With
    ``in_process`` (``--actor-runtime inprocess``: one rank, no Ray) the rank is an object in
    this process, called directly: for debugging, and for the driver's tests with fake backends."""

    def __init__(
        self,
        rank_class: RankClass,
        config: Config,
        num_ranks: int,
        num_gpus_per_rank: float = 0,
        actor_options=None,
        in_process: bool = False,
        env: dict[str, str] | None = None,
        master: str | None = None,
    ):
        """``actor_options(rank) -> dict`` (e.g. `slime_core.cluster.placement.Placement.train_options`)
        overrides the Ray options of each rank's actor; ``env`` adds environment variables to
        every rank's process (`slime_core.plugins.Plugins.worker_env`: the run's plugins);
        ``master``: the address this process serves the ranks' rendezvous store on
        (`Placement.rendezvous`: this node's IP across nodes; default the loopback), on a port
        the store binds as it picks it (`slime_core.rank.process_group.serve_store`); one rank needs none."""
        master_addr, port, self._store = master or LOOPBACK, 0, None
        self.num_ranks = num_ranks
        #: each rank's data-parallel rank (its model replica), as its ``init()`` says; one each until then
        self.replicas = list(range(num_ranks))
        if in_process:
            if num_ranks != 1:
                raise ValueError(f"--actor-runtime inprocess runs one train rank, not {num_ranks}")
            self.ranks = [_InProcessRank(rank_class(config, 0, 1, master_addr, port))]
            return
        if num_ranks > 1:
            self._store, port = serve_store(master_addr)
            env = {**(env or {}), SERVED_STORE_ENV: "1"}
        import ray
        from ray import cloudpickle

        actor = ray.remote(num_cpus=0, num_gpus=num_gpus_per_rank)(RankProcess)
        threads = {} if num_gpus_per_rank else cpu_thread_options(max(1, (os.cpu_count() or 1) // num_ranks))
        pickled = cloudpickle.dumps(rank_class)
        self.ranks = []
        for rank in range(num_ranks):
            options, rank_env = _env_apart({**threads, **(actor_options(rank) if actor_options else {})})
            self.ranks.append(
                actor.options(**options).remote(
                    {**rank_env, **(env or {})}, pickled, config, rank, num_ranks, master_addr, port
                )
            )

    def call(self, method: str, *args) -> list[Any]:
        """``method(*args)`` on every rank; the results in rank order."""
        return self._gather([rank.call.remote(method, *args) for rank in self.ranks], method)

    def _gather(self, calls: list, method: str) -> list[Any]:
        """The results of calls made with ``.remote`` (Ray object refs, or in-process values).
        A failure is raised as soon as one rank fails, without waiting for its peers, which may
        wait for it in a collective for ever; a rank that died stops the run as `RankLost`."""
        if self.ranks and isinstance(self.ranks[0], _InProcessRank):
            return list(calls)
        import ray

        pending = list(calls)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done)
            except ray.exceptions.RayError:
                lost = self._lost_rank(calls, method)
                if lost is None:
                    raise
                raise lost from None
        return ray.get(calls)

    def _lost_rank(self, calls: list, method: str) -> RankLost | None:
        """After a call failed: the error naming a rank that died, if one did, else one that
        still has not answered (hung: its peers gave up on it after ``--distributed-timeout-minutes``).
        A dead rank's peers may fail first (their connection to it closed), so Ray is given
        `LOST_RANK_WAIT_S` to report the death itself."""
        import ray

        ready, silent = ray.wait(calls, num_returns=len(calls), timeout=LOST_RANK_WAIT_S)
        timed_out = None
        for rank, call in enumerate(calls):
            try:
                if call in ready:
                    ray.get(call)
            except ray.exceptions.RayActorError as exc:
                return RankLost(
                    f"train rank {rank} of {self.num_ranks} ({_dead_actor(exc)}) died during {method}. "
                    "The run stopped: a lost train rank is not replaced (--use-fault-tolerance replaces "
                    "rollout engines only); resume from the last checkpoint with --load"
                )
            except ray.exceptions.RayError as exc:
                if timed_out is None and "timed out" in str(exc).lower():
                    timed_out = (rank, exc)
        if silent and timed_out:
            hung = ", ".join(str(calls.index(call)) for call in silent)
            rank, error = timed_out
            return RankLost(
                f"train rank(s) {hung} of {self.num_ranks} did not answer {method}: hung (stopped, deadlocked); "
                f"rank {rank} gave up waiting for them after --distributed-timeout-minutes "
                f"({_last_line(error)}). The run stopped; resume from the last checkpoint with --load"
            )
        return None

    def init(self) -> dict[str, Any]:
        """Load (or resume) every rank; ``{"rollout_id": next rollout, "weight_version": int}``.
        A rank that belongs to a model replica of several ranks (they train on the same samples)
        also answers its ``"data_parallel_rank"``; ranks that do not are a replica each."""
        answers = self.call("init")
        self.replicas = [answer.get("data_parallel_rank", rank) for rank, answer in enumerate(answers)]
        return {key: value for key, value in answers[0].items() if key != "data_parallel_rank"}

    def weight_version(self) -> int:
        return self.call("weight_version")[0]

    def check_finite_weights(self, action: str) -> None:
        """Raise `NonFiniteError` instead of ``action`` (a weight update, a checkpoint) when a
        rank holds a parameter that is NaN or infinite: such weights never leave the trainer."""
        names = sorted({name for names in self.call("nonfinite_weights") for name in names})
        if names:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            raise NonFiniteError(
                f"refusing to {action}: {len(names)} of the trainer's parameters hold NaN or infinite values "
                f"({shown}); "
                "steps with a non-finite gradient are skipped, so something else wrote them (a hook, a loaded "
                "checkpoint, --lr). Fix that and resume from the last checkpoint (--load)"
            )

    def save(self, rollout_id: int) -> str:
        """A checkpoint under ``--save`` (every rank writes its part); its directory."""
        return self.call("save", rollout_id)[0]

    def save_hf(self, path: str) -> None:
        """A Hugging Face model directory at ``path``."""
        self.call("save_hf", path)

    def offload(self) -> None:
        """Weights and optimizer state to CPU memory (colocated runs, while engines generate)."""
        self.call("offload")

    def onload(self) -> None:
        self.call("onload")

    def compute_log_probs(self, batch: RolloutBatch, model: str = "actor") -> list[list[float]]:
        """Log-probs of every sample of ``batch``, in the batch's order."""
        return self._per_sample("compute_log_probs", batch, model)

    def compute_values(self, batch: RolloutBatch) -> list[list[float]]:
        """A critic's values of every sample of ``batch``, in the batch's order."""
        return self._per_sample("compute_values", batch)

    def _per_sample(self, method: str, batch: RolloutBatch, *args) -> list[list[float]]:
        """Each rank computes ``method`` on its share; the answers put back in batch order."""
        shares = self._shares(batch)
        calls = [rank.call.remote(method, batch.select(share), *args) for rank, share in zip(self.ranks, shares)]
        results = self._gather(calls, method)
        out: list[list[float]] = [[] for _ in range(len(batch))]
        for share, result in zip(shares, results):
            for index, log_probs in zip(share, result):
                out[index] = log_probs
        return out

    def train(self, rollout_id: int, batch: RolloutBatch, on_step: Callable | None = None) -> dict[str, float]:
        """One rollout's optimizer steps on every rank, one at a time; the rollout's
        global-batch metrics. ``on_step(step)`` is a context manager entered around each step
        (the driver fires ``slime_before/after_train_step`` in it); it yields a dict that it
        reads after the step, which is filled with the step's metrics."""
        shares = self._shares(batch)
        steps = self._gather(
            [
                rank.call.remote("start_train", rollout_id, batch.select(share))
                for rank, share in zip(self.ranks, shares)
            ],
            "start_train",
        )[0]
        for step in range(steps):
            with on_step(step) if on_step else nullcontext({}) as metrics:
                metrics.update(self.call("train_step", step)[0])
        return self.call("finish_train")[0]

    def train_critic(self, rollout_id: int, batch: RolloutBatch) -> dict[str, float]:
        """A PPO critic's rollout: its ranks fit the values in one ``train(rollout_id, share)``
        call each (critic ranks have no step hooks); the global-batch metrics."""
        shares = self._shares(batch)
        return self._gather(
            [rank.call.remote("train", rollout_id, batch.select(share)) for rank, share in zip(self.ranks, shares)],
            "train",
        )[0]

    def _shares(self, batch: RolloutBatch) -> list[list[int]]:
        """The sample indices each rank is handed: whole prompt groups per data-parallel rank
        (`dp_rank_indices`), all of a replica's given to its first rank and none to the others,
        which gather their replica's union themselves (e.g. `slime_megatron.shares`)."""
        per_replica = dp_rank_indices(batch, max(self.replicas) + 1)
        shares: list[list[int]] = []
        for rank, replica in enumerate(self.replicas):
            first = self.replicas.index(replica) == rank
            shares.append(per_replica[replica] if first else [])
        return shares

    def export_weights(self, bucket_bytes: int, adapter_only: bool = False) -> Iterator[WeightBucket]:
        """The weights in Hugging Face names and shapes, one bucket at a time (iterate a
        bucket for its ``(name, tensor)`` pairs); ``adapter_only``: a LoRA policy's adapter alone."""
        plan = (bucket_bytes, True) if adapter_only else (bucket_bytes,)  # backends without LoRA take bytes alone
        for index in range(self.call("weight_buckets", *plan)[0]):
            yield self.call("export_bucket", index)[0]

    def shutdown(self) -> None:
        ranks, self.ranks, self._store = self.ranks, [], None
        if ranks and not isinstance(ranks[0], _InProcessRank):
            import ray

            for rank in ranks:
                ray.kill(rank)


class RankLost(RunFault):
    """A train rank's process died (or its node was lost); the message names the rank."""


def _last_line(error) -> str:
    """The last non-empty line of an error's text (a rank's traceback ends with its message)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(error).__name__


def _dead_actor(error) -> str:
    """Where a dead actor ran and why Ray says it died, from Ray's message: ``pid P on IP:
    <Ray's first sentence on the cause>``."""
    lines = [line.strip() for line in str(error).splitlines()]
    fields = dict(line.split(": ", 1) for line in lines if line.startswith(("pid: ", "ip: ")))
    cause = next((line for line in lines if "is dead because" in line), "")
    where = f"pid {fields.get('pid', '?')} on {fields.get('ip', '?')}"
    return f"{where}: {cause.split('. ')[0].rstrip('.')}" if cause else where


class RankProcess:
    """The Ray actor of one training rank: sets the rank's environment variables, then loads
    its backend's rank class and makes the rank; `call` runs one of the rank's methods.

    The variables are set here rather than in a Ray ``runtime_env`` because a runtime_env
    costs every rank a worker process of its own, started through Ray's setup script (0.6 s
    and 0.6 CPU-s more per rank on 2 cores), where a plain actor takes a worker Ray keeps
    ready. They are still set before the rank class is unpickled, so before its module
    imports torch: OpenMP reads ``OMP_NUM_THREADS`` once, when torch loads it."""

    def __init__(self, env: dict[str, str], pickled_rank_class: bytes, *args):
        from ray import cloudpickle

        os.environ.update(env)
        sys.path[:0] = [path for path in env.get("PYTHONPATH", "").split(os.pathsep) if path and path not in sys.path]
        rank_class = cloudpickle.loads(pickled_rank_class)
        self.name = f"{rank_class.__name__} rank {args[1]}"  # args: config, rank, world size, master
        self.rank = rank_class(*args)

    def call(self, method: str, *args) -> Any:
        return getattr(self.rank, method)(*args)

    def __repr__(self) -> str:  # Ray prefixes the actor's log lines with it
        return getattr(self, "name", "RankProcess")


def _env_apart(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Ray actor ``options`` without the environment variables of their runtime_env (no
    runtime_env left if it held nothing else), and those variables, for `RankProcess`."""
    runtime_env = dict(options.get("runtime_env") or {})
    env = runtime_env.pop("env_vars", {})
    rest = {key: value for key, value in options.items() if key != "runtime_env"}
    return ({**rest, "runtime_env": runtime_env} if runtime_env else rest), env


class _InProcessRank:
    """A rank object called like a `RankProcess` actor handle: ``rank.call.remote(method,
    *args)`` runs the method now and gives its result (what `TrainGroup._gather` then passes
    through)."""

    def __init__(self, rank):
        self.call = SimpleNamespace(remote=lambda method, *args: getattr(rank, method)(*args))


def with_env(actor_options: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """Ray actor options with ``env`` added to the environment variables of their runtime_env."""
    if not env:
        return actor_options
    runtime_env = dict(actor_options.get("runtime_env") or {})
    runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **env}
    return {**actor_options, "runtime_env": runtime_env}


def cpu_thread_options(threads: int) -> dict[str, Any]:
    """Ray actor options that start a CPU rank with ``threads`` OpenMP threads: Ray sets
    ``OMP_NUM_THREADS`` to an actor's CPU count (1 here), and `RankProcess` sets this value
    instead before torch loads; ranks read the variable for their thread count."""
    return {"runtime_env": {"env_vars": {"OMP_NUM_THREADS": str(threads)}}}
