"""The parts of a run, started in order on an `ExitStack` that stops them in reverse.

In order: the placement (a Ray placement group with the bundles the train backend's ranks,
a PPO critic and the rollout backend's engines need), the train ranks (and a critic, from the
``slime_register_critics`` registration of ``--train-backend``) alongside the rollout engines
(``--rollout-backend``) and the router (``--router``, started empty while the engines start,
then given them), the rollout manager, colocation and the weight sync; on resume, the data
source's state and the trainer's weights pushed to the engines, which a fresh run also does
when its engines may hold other weights (external engines, a trainer not starting from
``--hf-checkpoint``). Every part is looked up by
name in the plugin registries: nothing here knows which package provides it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from slime_core.rollout.parts import needs_engines

if TYPE_CHECKING:
    from slime_core.cluster.placement import Placement
    from slime_core.config import Config
    from slime_core.engine import RolloutEngine
    from slime_core.loop.colocation import Colocation
    from slime_core.loop.run_dir import RunDir
    from slime_core.loop.weight_sync import WeightSync
    from slime_core.plugins import Plugins
    from slime_core.rollout.debug_data import ReplayedRollouts
    from slime_core.rollout.manager import RolloutManager
    from slime_core.rollout_backend import ActorOptions, Engines, RolloutBackend
    from slime_core.router import Router
    from slime_core.train_backend import RankClass, TrainGroup

T = TypeVar("T")


@dataclass
class Parts:
    """A run's started parts (None where the run has no such part)."""

    config: Config  # the config the parts were started with: the run's, with the placement's network
    placement: Placement
    trainer: TrainGroup | None  # None with --debug-rollout-only
    critic: TrainGroup | None  # the PPO critic's ranks
    backend: RolloutBackend | None  # when engines run
    engines: Engines | None
    router: Router | None
    rollouts: RolloutManager | ReplayedRollouts  # generated, or replayed from files
    colocation: Colocation
    weights: WeightSync | None  # when there are engines to update
    start: int  # the first rollout to run (after a resume: the one after the checkpoint)
    version: int  # the trainer's weight version


def start_parts(config: Config, plugins: Plugins, run_dir: RunDir, stack: ExitStack) -> Parts:
    """Start every part of the run; each is stopped by ``stack`` (in reverse) at its close."""
    engine_side = _engine_side(config, plugins)
    run_dir.mark("Ray up")
    placement = stack.enter_context(_reserved(config, engine_side))
    config = config.replace(network=placement.network)  # the run's addresses and token, for every part
    run_dir.log(placement.describe())
    run_dir.mark("placement reserved")
    training = {}

    def start_training():
        training.update(_start_training(config, plugins, placement, stack))
        run_dir.mark("train ranks loaded")

    tokenizer = _tokenizer_loading(config)
    # In one process (--actor-runtime inprocess) the rank and an in-process engine would load their
    # models at once, and transformers' loading is not thread-safe (one got meta tensors: 1 run in 5).
    in_one_process = config.actor_runtime == "inprocess"
    with _alongside(start_training, parallel=not (config.colocate and placement.gpu) and not in_one_process):
        engines = router = None
        if engine_side is not None:
            engines, router = _engines_and_router(config, plugins, engine_side, placement, run_dir, stack)
        rollouts = _stopped_by(stack, _rollouts(config, plugins, engine_side, engines, router, tokenizer), "close")
    trainer, critic = training.get("trainer"), training.get("critic")
    from slime_core.loop.colocation import Colocation
    from slime_core.rollout.manager import RolloutManager

    generating = rollouts if isinstance(rollouts, RolloutManager) else None
    control = generating.engine_control if generating is not None else None  # None without engines
    colocation = Colocation(config.colocate, trainer, control)
    weights = None
    if control is not None and trainer is not None:
        from slime_core.loop.weight_sync import WeightSync

        weights = _stopped_by(
            stack,
            WeightSync(config, trainer, control, Path(run_dir.path) / "weights", gpu=placement.gpu, log=run_dir.log),
            "close",
        )
    parts = Parts(
        config,
        placement,
        trainer,
        critic,
        engine_side,
        engines,
        router,
        rollouts,
        colocation,
        weights,
        training.get("start", 0),
        training.get("version", 0),
    )
    run_dir.write_placement(placement_record(placement, router))
    if parts.start > 0:
        _resume(config, parts)
    elif parts.weights is not None and engines is not None and _engines_may_hold_other_weights(config, engines):
        parts.weights.push(parts.version)
        run_dir.mark("first weights pushed")
    return parts


def _engines_may_hold_other_weights(config: Config, engines: Engines) -> bool:
    """Whether, before the first rollout of a fresh run, the engines may serve weights other than
    the trainer's, which THUDM slime answers by always pushing them first: engines the run cannot
    restart (external ones serve whatever they were last given; a backend whose engines it
    started but cannot restart gets the push too, the safe side), or a trainer that does not
    start from ``--hf-checkpoint``, which started engines load (a Megatron ``--ref-load``, as in
    slime, or a model-only ``--load`` checkpoint such as ``slime convert``'s). Otherwise the
    engines already hold those weights, and a push would only cost time."""
    from slime_core.checkpoint.directory import resume_checkpoint, starts_from_ref_load

    loaded = resume_checkpoint(config) is not None
    return not engines.restartable or starts_from_ref_load(config) or loaded


def placement_record(placement: Placement, router: Router | None) -> dict[str, Any]:
    """``placement.json``: the node of each rank, engine, the driver and the router it started."""
    record = placement.record()
    if router is not None and "driver" in record["parts"]:
        record["parts"]["router"] = {**record["parts"]["driver"], "url": router.url}
    return record


def _engine_side(config: Config, plugins: Plugins) -> RolloutBackend | None:
    """The rollout backend when this run generates (None: replayed rollouts, or a rollout
    function that needs no engine, such as ``sft``)."""
    if config.debug_train_only:
        return None
    if not needs_engines(plugins.registry("rollout_functions").get(config.rollout_function)):
        return None
    return plugins.registry("rollout_backends").get(config.rollout_backend)


@contextmanager
def _reserved(config: Config, backend: RolloutBackend | None) -> Iterator[Placement]:
    """The run's placement: the ranks' bundles and the engines' the backend asks for."""
    from slime_core.cluster.placement import Placement, cluster_has_gpus

    in_process = config.actor_runtime == "inprocess"
    gpu = _has_cuda() if in_process else cluster_has_gpus()
    bundles = backend.engine_bundles(config, gpu) if backend is not None else []
    placement = Placement.in_process(config, bundles) if in_process else Placement.reserve(config, bundles, gpu)
    try:
        yield placement
    finally:
        placement.release()


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _stopped_by(stack: ExitStack, part: T, method: str) -> T:
    """``part``, whose ``method`` the stack calls when it closes."""
    stack.callback(getattr(part, method))
    return part


@contextmanager
def _alongside(start: Callable[[], None], parallel: bool) -> Iterator[None]:
    """``start()`` in a thread while the body starts other parts: the train ranks load
    (imports, weights, process groups) while the engine servers do the same (a 2-rollout run
    of the tiny CPU model: 45 s → 38 s on 2 cores), and the router starts while the engines
    do. Waits for it at the end (also when the body fails, so what it started can be stopped)
    and raises its error. Colocated on GPUs the ranks and the engines would size their memory
    against each other, so there ``start()`` runs first."""
    if not parallel:
        start()
        yield
        return
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slime-start-training")
    started = pool.submit(start)
    try:
        yield
    finally:
        pool.shutdown(wait=True)
    started.result()


def _start_training(config: Config, plugins: Plugins, placement: Placement, stack: ExitStack) -> dict[str, Any]:
    """The train ranks (and a PPO critic), loaded or resumed; nothing with --debug-rollout-only."""
    if config.debug_rollout_only:
        return {}
    rank_class = plugins.registry("train_backends").get(config.train_backend)
    trainer = _stopped_by(
        stack, _train_group(config, plugins, rank_class, placement, placement.train_options), "shutdown"
    )
    started = {"trainer": trainer, "start": trainer.init()["rollout_id"], "version": trainer.weight_version()}
    if config.advantage_estimator == "ppo":
        from slime_core.checkpoint.directory import role_config

        critic_class = plugins.registry("critics").get(config.train_backend)
        critic_config = role_config(config, "critic", started["start"])  # its own checkpoints, the policy's rollout
        started["critic"] = _stopped_by(
            stack, _train_group(critic_config, plugins, critic_class, placement, placement.critic_options), "shutdown"
        )
        started["critic"].init()
    return started


def _train_group(
    config: Config, plugins: Plugins, rank_class: RankClass, placement: Placement, actor_options: ActorOptions
) -> TrainGroup:
    """One rank per ``--actor-num-nodes × --actor-num-gpus-per-node``, each placed by
    ``actor_options(rank)`` in its bundle (in this process with ``--actor-runtime inprocess``)
    and loading the run's plugins; they rendezvous at a store this process serves."""
    from slime_core.train_backend import TrainGroup

    ranks = config.actor_num_nodes * config.actor_num_gpus_per_node
    return TrainGroup(
        rank_class,
        config,
        ranks,
        actor_options=actor_options,
        in_process=config.actor_runtime == "inprocess",
        env=plugins.worker_env(),
        master=placement.rendezvous(),
    )


def _engines_and_router(
    config: Config, plugins: Plugins, backend: RolloutBackend, placement: Placement, run_dir: RunDir, stack: ExitStack
) -> tuple[Engines, Router]:
    """The engines, and the router (``--router``) started alongside them with no engine and
    given each once they answer: neither waits for the other to start. The router starts in
    this thread: the processes it starts die with the thread that started them
    (``slime_core.cluster.child_process.die_with_parent``), and the engines' thread ends."""
    started = {}

    def start_engines():
        started["engines"] = _stopped_by(stack, backend.start(config, placement.engine_options, plugins), "shutdown")
        run_dir.mark("engines healthy")

    with _alongside(start_engines, parallel=True):
        router = _stopped_by(stack, plugins.registry("routers").get(config.router)(config, [], plugins), "stop")
        run_dir.mark("router ready")
    engines = started["engines"]
    for url in engines.urls:
        router.add_worker(url)
    run_dir.mark("engines routed")
    return engines, router


def _tokenizer_loading(config: Config) -> Future[Any] | None:
    """The rollout manager's tokenizer, loaded in a thread while the engines and the ranks start:
    after them it cost 1.1 s of transformers imports on the way to the first generation
    (benchmarks/startup.py); at once where the prompt checks loaded it (`load_tokenizer`).
    None where rollouts are replayed from files.

    With ``--actor-runtime inprocess`` it is loaded here, before the train rank's start-up
    thread: that thread imports transformers too, and two threads resolving names of its lazy
    module at once fail (``cannot import name 'AutoModelForCausalLM' from 'transformers'``,
    3 runs of 3 of the SFT quickstart)."""
    if config.load_debug_rollout_data:
        return None
    from slime_core.tokenizer import load_tokenizer

    if config.actor_runtime == "inprocess":
        loaded: Future[Any] = Future()
        loaded.set_result(load_tokenizer(config.hf_checkpoint))
        return loaded
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slime-load-tokenizer")
    loading = pool.submit(load_tokenizer, config.hf_checkpoint)
    pool.shutdown(wait=False)
    return loading


def _rollouts(
    config: Config,
    plugins: Plugins,
    backend: RolloutBackend | None,
    engines: Engines | None,
    router: Router | None,
    tokenizer: Future[Any] | None,
) -> RolloutManager | ReplayedRollouts:
    """Where rollouts come from: generated (the rollout manager, given the ``tokenizer`` being
    loaded), or replayed from files."""
    if config.load_debug_rollout_data:
        from slime_core.rollout.debug_data import ReplayedRollouts

        return ReplayedRollouts(config.load_debug_rollout_data, config.get("load_debug_rollout_data_subsample"))
    from slime_core.rollout.manager import RolloutManager

    rollout_fn = plugins.registry("rollout_functions").get(config.rollout_function)
    make_client = None
    if engines is not None and backend is not None and router is not None:
        from slime_core.router import generation_client

        client_for = partial(backend.client, api_key=config.network.token)  # the run's servers want its token
        started = router

        async def make_client() -> RolloutEngine:  # on the rollout loop, which the client's connections belong to
            return generation_client(started, client_for)

    return RolloutManager(
        config, plugins, rollout_fn, make_client, engines, tokenizer=tokenizer.result() if tokenizer else None
    )


def _resume(config: Config, parts: Parts) -> None:
    """The data source as it was at the checkpoint, and the engines on the trainer's weights."""
    from slime_core.checkpoint.directory import rollout_state_path

    state_file = rollout_state_path(config.load, parts.start - 1)
    if not state_file.is_file():
        raise FileNotFoundError(
            f"--load {config.load}: the checkpoint of rollout {parts.start - 1} has no "
            f"data-source state ({state_file}); was it written by `slime run`?"
        )
    parts.rollouts.load_state_dict(json.loads(state_file.read_text())["data_source"])
    if parts.weights is not None:
        parts.weights.push(parts.version)
