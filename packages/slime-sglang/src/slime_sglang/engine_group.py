"""`EngineGroup`: the rollout engines of a run, and each control call sent to all of them
(``slime_core.rollout_backend.Engines``, as the sglang rollout backend's engines).

``EngineGroup.start(config, model_path)`` starts ``--rollout-num-gpus //
--rollout-num-gpus-per-engine`` servers of the registered engine ``--rollout-engine``, each
an `EngineServer` Ray actor (with ``--rollout-engine cpu`` the same options count CPU
engines), side by side (with ``--sglang-config``: the engines of its server groups, each with
its group's options, `slime_sglang.deployment`), and returns once every one answers ``/health``. With
``--rollout-external-engine-addrs HOST:PORT ...`` it starts nothing: it uses those engines,
already running (SGLang servers or ``slime engine serve``), checks that each answers, and
never shuts them down.

`restart(index)` replaces a failed engine that the group started by a fresh one in the same
place (``--use-fault-tolerance``: ``slime_core.loop.fault_tolerance``).

Control calls (pause, weight updates, ...) go to every engine concurrently (with the run's
token: ``slime_core.cluster.network``), each over a connection of its own
made for the call, so one group serves any event loop (also one that ``asyncio.run`` makes
per phase), and may take `CONTROL_TIMEOUT_S` at most. A call that fails on some engine raises
that engine's `EngineError` once every engine has answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from slime_core.cluster.engine_servers import (
    engine_count,
    engine_log,
    health_problem,
    restart_server,
    start_servers,
    stop_servers,
)
from slime_core.cluster.network import Network
from slime_core.rank.weight_bucket import WeightBucket
from slime_core.rollout_backend import WEIGHT_TRANSPORTS
from slime_sglang.client import EngineClient
from slime_sglang.deployment import engine_configs

if TYPE_CHECKING:
    from slime_core.config.config import Config

HEALTH_TIMEOUT_S = 5.0  # an external engine must answer /health within this
#: Seconds one control call (pause, a weight bucket, loading weights from disk, joining a
#: broadcast group) may take before it fails naming the engine and the endpoint: the longest
#: of them, a large model's weights loaded from disk, takes a few minutes.
CONTROL_TIMEOUT_S = 600.0


class EngineGroup:
    """The engines of a run: started here (as Ray actors) or external."""

    transports = WEIGHT_TRANSPORTS  # the CPU engine's (and external engines', unknown) weight transports
    loads_lora_adapters = False  # the CPU engine started by this group does (`slime_sglang.backend`)

    def __init__(
        self,
        urls: list[str],
        servers: list | None = None,
        request_timeout: float | None = CONTROL_TIMEOUT_S,
        launch: tuple | None = None,
        ranks_per_engine: int = 1,
        network: Network | None = None,
        per_copy_seeds: bool = False,
        engine_configs: list[Config] | None = None,
    ):
        self.urls = list(urls)
        self.per_copy_seeds = per_copy_seeds  # the engine command is `slime_sglang.servers.seeds_each_copy`
        self._network = network or Network()  # the run's: its token and where a broadcast group listens
        self._servers = list(servers or [])  # Ray actors of the servers this group started
        self._request_timeout = request_timeout  # seconds per control call
        self._launch = launch  # (config, command_fn, model_path, actor_options) of started engines
        self._ranks_per_engine = ranks_per_engine  # ranks of one engine in a broadcast group (its TP size on GPUs)
        self._broadcaster = None  # slime_sglang.weight_broadcast.WeightBroadcaster, once a broadcast update ran
        self._engine_configs = list(engine_configs or [])  # the config each started engine runs with (its group's)

    @classmethod
    def start(cls, config: Config, model_path: str, plugins=None, actor_options=None) -> EngineGroup:
        """The run's engines serving ``model_path``: started, or external (see the module docstring).

        ``plugins`` (default: ``slime_core.plugins.Plugins()``, as a Ray worker sees them)
        supply the command of ``--rollout-engine``; ``actor_options(index) -> dict`` places
        each engine's actor (`slime_core.cluster.placement.Placement.engine_options`).
        """
        if plugins is None:
            from slime_core.plugins import Plugins

            plugins = Plugins()
        command_fn = plugins.registry("rollout_engines").get(config.rollout_engine)
        per_copy_seeds = getattr(command_fn, "seeds_each_copy", False)  # external ones: as --rollout-engine says
        if config.get("rollout_external_engine_addrs"):
            return cls.connect(config.rollout_external_engine_addrs, per_copy_seeds=per_copy_seeds)
        actor_options = _loading_plugins(actor_options, plugins.worker_env())
        configs = engine_configs(config) or [config] * engine_count(config)  # --sglang-config's groups, or alike
        urls, servers = start_servers(
            config,
            command_fn,
            model_path,
            len(configs),
            actor_options,
            kind=config.rollout_engine,
            gpus=server_gpus(configs[0]),
            engine_config=configs.__getitem__,
        )
        return cls(
            urls,
            servers,
            launch=(config, command_fn, model_path, actor_options),
            ranks_per_engine=configs[0].rollout_num_gpus_per_engine,
            network=config.network,
            per_copy_seeds=per_copy_seeds,
            engine_configs=configs,
        )

    @classmethod
    def connect(cls, addresses: list[str], ranks_per_engine: int = 1, per_copy_seeds: bool = False) -> EngineGroup:
        """Engines already running at ``addresses`` (``HOST:PORT`` or URLs), each checked healthy."""
        urls = [engine_url(address) for address in addresses]
        problems = [
            f"external engine {problem}"
            for problem in (health_problem(url, HEALTH_TIMEOUT_S) for url in urls)
            if problem
        ]
        if problems:
            raise RuntimeError(
                "; ".join(problems) + ". Start the engines first, or fix --rollout-external-engine-addrs"
            )
        return cls(urls, ranks_per_engine=ranks_per_engine, per_copy_seeds=per_copy_seeds)

    def only(self, index: int) -> EngineGroup:
        """Engine ``index`` alone, with a broadcast group of its own (``Engines.only``)."""
        one = EngineGroup(
            [self.urls[index]],
            request_timeout=self._request_timeout,
            ranks_per_engine=self._ranks_per_engine,
            network=self._network,
            per_copy_seeds=self.per_copy_seeds,
        )
        one.transports = self.transports
        one.loads_lora_adapters = self.loads_lora_adapters
        return one

    def health_problem(self, index: int, timeout: float) -> str | None:
        """Why engine ``index`` fails ``/health`` (died, hung, unhealthy, with its answer), or
        None; names the engine's log when this group started it."""
        problem = health_problem(self.urls[index], timeout)
        if problem is None or self._launch is None:
            return problem

        return f"{problem}; its log: {engine_log(self._launch[0], index, int(self.urls[index].rsplit(':', 1)[1]))}"

    # -- control calls, to every engine at once ---------------------------------------------
    async def pause(self) -> None:
        await self._each(lambda client, _: client.pause_generation())

    async def resume_generation(self) -> None:
        await self._each(lambda client, _: client.continue_generation())

    async def flush_cache(self) -> None:
        await self._each(lambda client, _: client.flush_cache())

    async def abort(self) -> None:
        """Abort every request in flight on every engine (a router forwards generation, not
        this control call, so it goes to each engine itself)."""
        await self._each(lambda client, _: client.abort())

    async def release_memory(self) -> None:
        await self._each(lambda client, _: client.release_memory())

    async def resume_memory(self) -> None:
        await self._each(lambda client, _: client.resume_memory())

    async def update_weights_from_tensor(self, bucket: WeightBucket | list[tuple[str, Any]], version: str) -> None:
        """Load one bucket of ``(hf_name, tensor)`` pairs into every engine (packed once for all)."""
        bucket = WeightBucket.of(bucket)
        await self._each(lambda client, _: client.update_weights_from_tensor(bucket, version))

    async def update_weights_from_disk(self, path: str, version: str) -> None:
        """Load a Hugging Face directory's weights into every engine."""
        await self._each(lambda client, _: client.update_weights_from_disk(path, version))

    async def update_weights_by_broadcast(self, bucket: WeightBucket, version: str) -> None:
        """Load one bucket into every engine by a collective this process sends, over a group
        formed on first use and kept until `close_weight_updates` (nccl on GPUs, gloo on CPU)."""
        if self._broadcaster is None:
            from slime_sglang.weight_broadcast import WeightBroadcaster, collective_backend

            self._network.use_node_interface_for_gloo()
            self._broadcaster = await WeightBroadcaster.connect(
                self.urls,
                backend=collective_backend(),
                master_address=self._network.listen_host(),
                ranks_per_engine=self._ranks_per_engine,
                api_key=self._network.token,
            )
        await self._broadcaster.broadcast(WeightBucket.of(bucket), version)

    async def pull_weights(self, source_dir: str, local_dir: str, version: int) -> None:
        """Every engine brings its host's local checkpoint to published ``version``
        (``/pull_weights``: the CPU engine's, or THUDM/slime's patched SGLang's)."""
        await self._each(lambda client, _: client.pull_weights(source_dir, local_dir, version))

    async def close_weight_updates(self) -> None:
        """Leave the broadcast group, if one was formed."""
        broadcaster, self._broadcaster = self._broadcaster, None
        if broadcaster is not None:
            await broadcaster.close()

    async def weight_versions(self) -> list[str]:
        """The weight version each engine serves, in the order of `urls`."""
        return await self._each(lambda client, _: client.weight_version())

    # -- weight updates by broadcast (slime_sglang.weight_broadcast) --------------------------
    async def init_weights_update_group(
        self, master_address: str, master_port: int, group_name: str, backend: str, ranks_per_engine: int = 1
    ) -> None:
        """Every engine joins the sender's group (the sender is rank 0; engine ``i`` starts at
        rank ``1 + i × ranks_per_engine``: its tensor-parallel size on GPUs, 1 on CPU)."""
        world_size = 1 + len(self.urls) * ranks_per_engine
        await self._each(
            lambda client, i: client.init_weights_update_group(
                master_address, master_port, 1 + i * ranks_per_engine, world_size, group_name, backend
            )
        )

    async def update_weights_from_distributed(
        self, names: list[str], dtypes: list[str], shapes: list[list[int]], group_name: str, version: str
    ) -> None:
        """Every engine receives the announced tensors by broadcast (the sender broadcasts meanwhile)."""
        await self._each(
            lambda client, _: client.update_weights_from_distributed(names, dtypes, shapes, group_name, version)
        )

    async def destroy_weights_update_group(self, group_name: str) -> None:
        await self._each(lambda client, _: client.destroy_weights_update_group(group_name))

    @property
    def restartable(self) -> bool:
        """Whether this group started its engines (external engines cannot be restarted)."""
        return self._launch is not None

    def restart(self, index: int) -> str:
        """Kill engine ``index`` (SIGKILL: it may be hung), start a fresh one on the initial
        weights in its placement, and return its URL once it is healthy. The caller brings it to
        the current weights and tells the router. When its node was lost, its bundle moves to
        another node with room once Ray has declared the node dead; until then a start there
        fails, and is tried again (`RESTART_ATTEMPTS` times, `RESTART_WAIT_S` apart)."""
        if not self.restartable:
            raise RuntimeError("external engines (--rollout-external-engine-addrs) cannot be restarted by slime")
        config = self._engine_configs[index]
        self.urls[index], self._servers[index] = restart_server(
            self._servers, index, (config, *self._launch[1:]), kind=config.rollout_engine, gpus=server_gpus(config)
        )
        return self.urls[index]

    def shutdown(self) -> None:
        """Stop the servers this group started and their actors (idempotent); external
        engines keep running."""
        servers, self._servers = self._servers, []
        stop_servers(servers)

    async def _each(self, call: Callable[[EngineClient, int], Awaitable[Any]]) -> list:
        """``call(client, index)`` for every engine concurrently; their results, in order."""
        clients = [EngineClient(url, timeout=self._request_timeout, api_key=self._network.token) for url in self.urls]
        try:
            results = await asyncio.gather(
                *(call(client, i) for i, client in enumerate(clients)), return_exceptions=True
            )
        finally:
            await asyncio.gather(*(client.close() for client in clients))
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results


def _loading_plugins(actor_options, env: dict[str, str]):
    """``actor_options`` whose actors (and the servers they start) see ``env``: the run's
    local plugins (`slime_core.plugins.Plugins.worker_env`)."""
    from slime_core.train_backend import with_env

    if not env:
        return actor_options
    return lambda index: with_env(actor_options(index) if actor_options else {}, env)


def server_gpus(config: Config) -> int:
    """The GPUs of one engine's actor outside a placement: none for the CPU engine, else
    ``--rollout-num-gpus-per-engine``."""
    return 0 if config.rollout_engine == "cpu" else config.rollout_num_gpus_per_engine


def engine_url(address: str) -> str:
    """The base URL of an engine given as ``HOST:PORT`` (or already as a URL)."""
    if "://" in address:
        return address.rstrip("/")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"engine address {address!r} is not HOST:PORT (e.g. 10.0.0.5:30000)")
    return f"http://{host}:{port}"
