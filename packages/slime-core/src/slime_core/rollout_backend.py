"""The rollout-backend contract: how the loop starts, controls and updates rollout engines.

A rollout backend is registered by name (``slime_register_rollout_backends``, selected with
``--rollout-backend``; slime-sglang registers ``sglang``). The loop knows engines only
through these two protocols:

- `RolloutBackend`: what a run of it needs reserved (one Ray bundle per engine it starts),
  starting the engines on those bundles, and a generation client (`RolloutEngine`) for an
  engine's or a router's address;
- `Engines`: the running engines. Control calls go to every engine at once and are
  coroutines, run on the rollout event loop: pause / resume around a weight update, abort,
  flush, release / resume memory (colocated runs), and the weight-update transports the
  backend supports (`WEIGHT_TRANSPORTS`); `health_problem`, `restart` and `only` serve fault
  tolerance; `shutdown` stops what the backend started.

A minimal backend (see ``examples/plugins/slime-example-engine``)::

    class MyBackend:
        def engine_bundles(self, config, gpu):      # one bundle per engine
            return [{"CPU": 1}] * config.rollout_num_gpus
        def start(self, config, actor_options, plugins):  # engines up and healthy
            return MyEngines(...)
        def client(self, url):                      # generation, for the router or an engine
            return MyClient(url)

    @hookimpl
    def slime_register_rollout_backends(register):
        register("mine", MyBackend())
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from slime_core.engine import RolloutEngine
from slime_core.rank.weight_bucket import WeightBucket

if TYPE_CHECKING:
    from slime_core.config import Config
    from slime_core.plugins import Plugins

#: How new weights reach engines (``--update-weight-transport``): ``tensor`` (buckets of
#: tensors over the engine's API, in memory), ``broadcast`` (a collective from the driver,
#: nccl on GPUs, gloo on CPU), ``disk`` (a Hugging Face directory both sides can read).
WEIGHT_TRANSPORTS = ("tensor", "broadcast", "disk")

#: ``actor_options(index) -> dict``: the Ray actor options that place engine ``index`` in its
#: bundle of the run's placement group (`slime_core.cluster.placement.Placement.engine_options`).
ActorOptions = Callable[[int], dict]


class Engines(Protocol):
    """A run's running engines. Every coroutine acts on every engine concurrently and raises
    the first engine's error once all answered (`slime_core.engine.EngineError`;
    `EngineUnavailable` when an engine is gone).

    Optional: ``per_copy_seeds = True`` says that `RolloutEngine.generate_parallel` on these
    engines draws copy i with ``slime_core.engine.parallel_sample_seed(seed, i)``; only then does
    the default rollout send a group request its seed (an engine that gives every copy the same
    seed, as SGLang does, gets none). Absent means False.

    Optional: ``loads_lora_adapters = True`` says that every weight-update transport of these
    engines also takes a LoRA adapter (``X.lora_A.weight``, ``X.lora_B.weight``, ``X.lora_scaling``
    among the named tensors; a peft adapter directory from disk) and merges it into the base the
    engine holds (the CPU engine: `slime_sglang.cpu_engine.adapters`); a LoRA run then syncs the
    adapter alone. Absent means False: the merged weights are sent.

    Optional: ``preferred_transport = "broadcast"`` (one of `transports`) is the transport a run
    that is not colocated uses when ``--update-weight-transport`` is not given (vLLM's CPU build:
    its ``tensor`` route takes base64 over HTTP, several times slower than a gloo broadcast).
    Absent, None or not among `transports`: slime-core's rule (``tensor`` when colocated or
    without GPUs, ``broadcast`` on GPUs; `slime_core.loop.weight_sync.default_transport`)."""

    @property
    def urls(self) -> list[str]:
        """Each engine's address, as the router and `RolloutBackend.client` take it; the
        default rollout keeps ``--rollout-concurrency`` samples in flight per engine."""

    @property
    def transports(self) -> tuple[str, ...]:
        """The `WEIGHT_TRANSPORTS` these engines can take."""

    @property
    def restartable(self) -> bool:
        """Whether `restart` can replace an engine (started by the backend, not external)."""

    async def pause(self) -> None:
        """Stop decoding; running requests wait (before a weight update)."""

    async def resume_generation(self) -> None:
        """Decode again after `pause`."""

    async def abort(self) -> None:
        """Abort every request in flight; each returns what it has (finish reason ``abort``)."""

    async def flush_cache(self) -> None:
        """Drop cached prefixes (after a weight update)."""

    async def release_memory(self) -> None:
        """Free weights and caches while training runs on the same devices (``--colocate``)."""

    async def resume_memory(self) -> None:
        """Take the memory back after `release_memory`."""

    async def update_weights_from_tensor(self, bucket: WeightBucket, version: str) -> None:
        """Transport ``tensor``: load one bucket of ``(hf_name, tensor)`` pairs."""

    async def update_weights_by_broadcast(self, bucket: WeightBucket, version: str) -> None:
        """Transport ``broadcast``: receive one bucket by a collective that this process sends
        (the engines form the group with it on first use, until `close_weight_updates`)."""

    async def update_weights_from_disk(self, path: str, version: str) -> None:
        """Transport ``disk``: load the weights of the Hugging Face directory ``path``."""

    async def pull_weights(self, source_dir: str, local_dir: str, version: int) -> None:
        """``--update-weight-mode delta``: bring each engine host's local checkpoint ``local_dir``
        to published ``version`` (`slime_core.weight_delta`: full versions copied, deltas since
        the host's version applied, each tensor checked against its checksum); raise naming
        what failed, with nothing applied. The loop then loads ``local_dir`` from disk. Engines
        that cannot are refused at config time (`RolloutBackend`'s option checks)."""

    async def close_weight_updates(self) -> None:
        """Release what weight updates hold open (a broadcast group); safe when nothing is."""

    def health_problem(self, index: int, timeout: float) -> str | None:
        """Why engine ``index`` is failing (died, hung, unhealthy), or None when it answers
        within ``timeout`` seconds. Blocking: the fault-tolerance monitor's thread calls it."""

    def restart(self, index: int) -> str:
        """Kill engine ``index``, start a fresh one in its place on the initial weights, and
        return its address once healthy (it replaces ``urls[index]``). The loop then closes
        the weight updates (a broadcast group had the old engine in it) and brings the new
        engine to the current weights through `only`."""

    def only(self, index: int) -> Engines:
        """Engine ``index`` alone (to bring a replaced engine to the current weights)."""

    def shutdown(self) -> None:
        """Stop the engines the backend started (idempotent); external ones keep running."""


class RolloutBackend(Protocol):
    """A kind of rollout engine, registered by name (see the module docstring)."""

    def engine_bundles(self, config: Config, gpu: bool) -> list[dict[str, float]]:
        """The Ray resource bundle of each engine a run with ``config`` starts (``gpu``:
        whether the machine has CUDA), e.g. ``[{"GPU": 2, "CPU": 1}] * 4``; ``[]`` when it
        starts none (external engines). A bundle without GPU is a CPU engine, which shares
        the machine's cores with CPU train ranks. Colocated runs put engines in the train
        ranks' bundles instead; the count is still the number of engines."""

    def start(self, config: Config, actor_options: ActorOptions | None, plugins: Plugins) -> Engines:
        """Start the engines (placed by ``actor_options``) or connect to external ones, and
        return once every one answers; on failure, stop what started and raise. ``plugins``:
        the run's loaded plugins (for registries the backend keeps, such as engine commands)."""

    def client(self, url: str, api_key: str | None = None) -> RolloutEngine:
        """A generation client for the engine or router at ``url`` (made on the rollout
        event loop, whose connections it then uses). A run calls it with ``api_key=`` its
        token, to send as ``Authorization: Bearer`` with every request (`slime_core.cluster.network`)."""
