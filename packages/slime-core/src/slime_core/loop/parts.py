"""Starting and stopping the parts of a run, in order: the placement group, train ranks (and a PPO critic), the
rollout engines, the router, the rollout manager, the weight sync; on resume, the data
source's state and the trainer's weights pushed to the engines."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Callable


def start_parts(run) -> None:
    config, plugins = run.config, run.plugins
    rollout_fn = plugins.registry("rollout_functions").get(config.rollout_function)
    needs_engines = getattr(rollout_fn, "needs_engines", True) and not config.debug_train_only
    run.placement = _reserve(config, needs_engines)
    run.run_dir.log(run.placement.describe())
    training = (lambda: _start_training(run)) if not config.debug_rollout_only else (lambda: None)
    router_url = None
    with _alongside(training, parallel=not (config.colocate and run.placement.gpu)):
        if needs_engines:
            from slime_router.launch import start_router
            from slime_sglang.engine_group import EngineGroup

            run.engines = EngineGroup.start(config, config.hf_checkpoint, plugins, run.placement.engine_options)
            run.router = start_router(config, run.engines.urls)
            router_url = run.router.url
    run.rollouts = _rollouts(config, plugins, router_url)
    from slime_core.loop.colocation import Colocation

    run.colocation = Colocation(config.colocate, run.trainer, run.engines, run.rollouts.run if run.engines else None)
    if run.engines is not None and run.trainer is not None:
        from slime_core.loop.weight_sync import WeightSync

        run.weights = WeightSync(config, run.trainer, run.engines, run.rollouts.run, run.run_dir)
    if run.start > 0:
        _resume(run)
    if config.use_fault_tolerance and run.engines is not None:
        from slime_core.loop.fault_tolerance import EngineMonitor

        run.monitor = EngineMonitor(run).start()


@contextmanager
def _alongside(start: Callable[[], None], parallel: bool):
    """``start()`` in a thread while the body starts the engines and the router, so the train
    ranks load (imports, weights, process groups) while the engine servers do the same (a
    2-rollout run of the tiny CPU model: 45 s → 38 s on 2 cores). Waits for it at the end (also when the body
    fails, so what it started can be stopped) and raises its error. Colocated on GPUs the two
    would size their memory against each other, so there ``start()`` runs first."""
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


def _start_training(run) -> None:
    """The train ranks (and a PPO critic), loaded or resumed."""
    config, plugins = run.config, run.plugins
    run.trainer = _train_group(config, plugins, config.train_backend, run.placement.train_options)
    run.start = run.trainer.init()["rollout_id"]
    run.version = run.trainer.call("weight_version")[0]
    if config.advantage_estimator == "ppo":
        run.critic = _train_group(config, plugins, f"{config.train_backend}_critic", run.placement.critic_options)
        run.critic.init()


def _rollouts(config, plugins, router_url):
    """Where rollouts come from: generated (the rollout manager), or replayed from files."""
    if config.load_debug_rollout_data:
        from slime_core.loop.debug_rollouts import ReplayedRollouts

        return ReplayedRollouts(config.load_debug_rollout_data)
    from slime_sglang.rollout_manager import RolloutManager

    return RolloutManager(config, plugins, router_url)


def stop_parts(run) -> None:
    """Reverse order; each part is stopped even if an earlier one fails to stop."""
    steps = [
        lambda: run.monitor and run.monitor.stop(),
        lambda: run.weights and run.weights.close(),
        lambda: run.rollouts and run.rollouts.close(),
        lambda: run.router and run.router.stop(),
        lambda: run.engines and run.engines.shutdown(),
        lambda: run.critic and run.critic.shutdown(),
        lambda: run.trainer and run.trainer.shutdown(),
        lambda: run.placement and run.placement.release(),
    ]
    errors = []
    for step in steps:
        try:
            step()
        except Exception as exc:  # keep stopping the rest; report after
            errors.append(exc)
    if errors:
        raise errors[0]


def _reserve(config, needs_engines: bool):
    """The run's placement group: training ranks, and engines unless external or not needed."""
    from slime_core.placement import Placement

    started_engines = needs_engines and not config.get("rollout_external_engine_addrs")
    if not started_engines:
        return Placement.reserve(config, num_engines=0)
    from slime_sglang.engine_group import engine_count

    return Placement.reserve(config, num_engines=engine_count(config))


def _train_group(config, plugins, backend: str, actor_options):
    """One actor per rank (``--actor-num-nodes × --actor-num-gpus-per-node``), each placed by
    ``actor_options(rank)`` in its bundle."""
    from slime_core.train_backend import TrainGroup

    rank_class = plugins.registry("train_backends").get(backend)
    ranks = config.actor_num_nodes * config.actor_num_gpus_per_node
    return TrainGroup(rank_class, config, ranks, actor_options=actor_options)


def _resume(run) -> None:
    """The data source as it was at the checkpoint, and the engines on the trainer's weights."""
    state_file = Path(run.config.load) / "rollout_state" / f"iter_{run.start - 1:07d}.json"
    if not state_file.is_file():
        raise FileNotFoundError(f"--load {run.config.load}: the checkpoint of rollout {run.start - 1} has no "
                                f"data-source state ({state_file}); was it written by `slime run`?")
    run.rollouts.load_state_dict(json.loads(state_file.read_text())["data_source"])
    if run.weights is not None:
        run.weights.push(run.version)
