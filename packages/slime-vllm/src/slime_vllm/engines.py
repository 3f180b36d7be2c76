"""`VLLMEngines`: the vLLM servers of a run (``slime_core.rollout_backend.Engines``).

``VLLMEngines.start(config, model_path)`` starts ``--rollout-num-gpus //
--rollout-num-gpus-per-engine`` vLLM servers (`slime_vllm.servers.vllm_command`), each in a
slime-core `EngineServer` Ray actor placed by the run, and returns once every one answers
``/health``. Control calls go to every engine concurrently (`slime_vllm.client.VLLMClient`,
with the run's token), each over a connection made for the call, and raise the first
engine's error once all have answered.

Weight transports: ``disk`` (every worker reloads the Hugging Face directory in place),
``tensor`` (each bucket's safetensors bytes, to every worker) and ``broadcast`` (the driver
broadcasts each bucket over a group with the engines' workers, formed on first use and kept until
`close_weight_updates`: gloo on CPU, `slime_vllm.gloo_group`; on GPUs vLLM's NCCL weight-transfer
group, `slime_vllm.nccl_group`, offered with one GPU per engine where the driver can import vLLM
and has CUDA; not yet run on a GPU), all through
`slime_vllm.worker_extension`, then the new version is set (``/update_weight_version``).

A run that is not colocated and names no ``--update-weight-transport`` uses ``broadcast``
(`preferred_transport`).

Memory: `release_memory` and `resume_memory` are ``/sleep`` (level 1: weights to host memory,
the KV cache dropped; on GPUs this needs ``--vllm-enable-sleep-mode``) and ``/wake_up``. vLLM's
CPU build answers them and frees nothing: the engines stop scheduling until ``/wake_up`` and
keep their memory, which is said once as a warning.
"""

from __future__ import annotations

import asyncio
import json
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
from slime_vllm.client import VLLMClient
from slime_vllm.servers import vllm_command

if TYPE_CHECKING:
    from slime_core.config.config import Config

#: Seconds one control call may take (loading a large model's weights from disk takes minutes).
CONTROL_TIMEOUT_S = 600.0
#: The kind of engine, in errors about one that did not start.
KIND = "vllm"


class VLLMEngines:
    """The vLLM servers of a run, started as Ray actors."""

    transports: tuple[str, ...] = ("tensor", "broadcast", "disk")
    # The default when not colocated, on CPU and GPU: vLLM's tensor route passes each bucket through
    # HTTP /collective_rpc as base64 (2.1-2.4 s per 100 MB on CPU against 0.3-0.6 s by gloo); on GPUs
    # without the nccl group slime-core's rule applies (disk).
    preferred_transport = "broadcast"
    per_copy_seeds = True  # VLLMClient.generate_parallel seeds copy i with parallel_sample_seed(seed, i)
    _said_memory = False  # whether it was said that release_memory frees nothing on CPU

    def __init__(self, urls: list[str], servers: list, launch: tuple | None, network: Network, gpus: int):
        self.urls = list(urls)
        self._servers = list(servers)
        self._launch = launch  # (config, command_fn, model_path, actor_options); None for `only`'s view
        self._network = network
        self._gpus = gpus  # of each engine: 0 on CPU
        self._group: Any = None  # the broadcast transport's group (rank 0: this process), once formed
        if gpus:
            self.transports = ("tensor", "broadcast", "disk") if nccl_broadcast(gpus) else ("tensor", "disk")

    @classmethod
    def start(cls, config: Config, model_path: str, actor_options=None, gpu: bool = False) -> VLLMEngines:
        gpus = config.rollout_num_gpus_per_engine if gpu else 0
        launch = (config, vllm_command, model_path, actor_options)
        urls, servers = start_servers(
            config, vllm_command, model_path, engine_count(config), actor_options, kind=KIND, gpus=gpus
        )
        return cls(urls, servers, launch, config.network, gpus)

    @property
    def restartable(self) -> bool:
        return self._launch is not None

    def only(self, index: int) -> VLLMEngines:
        return VLLMEngines([self.urls[index]], [], None, self._network, self._gpus)

    # ---- control, on every engine -------------------------------------------------------
    async def pause(self) -> None:
        await self._each(lambda client: client.pause())

    async def resume_generation(self) -> None:
        await self._each(lambda client: client.resume())

    async def abort(self) -> None:
        await self._each(lambda client: client.abort_all())

    async def flush_cache(self) -> None:
        await self._each(lambda client: client.flush_cache())

    async def release_memory(self) -> None:
        if not self._gpus and not VLLMEngines._said_memory:
            VLLMEngines._said_memory = True
            print(
                "slime-vllm: warning: vLLM's CPU build frees no memory on /sleep: the engines pause and keep theirs",
                flush=True,
            )
        await self._each(lambda client: client.sleep())

    async def resume_memory(self) -> None:
        await self._each(lambda client: client.wake_up())

    async def update_weights_from_tensor(self, bucket: WeightBucket, version: str) -> None:
        bucket = WeightBucket.of(bucket)
        await self._each(lambda client: client.load_bucket(bucket, version))

    async def update_weights_from_disk(self, path: str, version: str) -> None:
        await self._each(lambda client: client.load_from_disk(path, version))

    async def update_weights_by_broadcast(self, bucket: WeightBucket, version: str) -> None:
        """Every engine receives the bucket by a broadcast from this process (see the module docstring)."""
        send = self._transport().send
        group = self._group or await self._join_group()
        self._group = group
        named = list(WeightBucket.of(bucket).tensors())
        meta = json.dumps(
            {
                "names": [name for name, _ in named],
                "dtypes": [str(tensor.dtype).removeprefix("torch.") for _, tensor in named],
                "shapes": [list(tensor.shape) for _, tensor in named],
            }
        )
        sending = asyncio.to_thread(send, group, [tensor for _, tensor in named])
        await asyncio.gather(self._each(lambda client: client.collective_rpc("slime_receive_bucket", meta)), sending)
        await self._each(lambda client: client.set_weight_version(version))

    def _transport(self):
        """The broadcast group's module: nccl on GPUs, gloo on CPU."""
        from slime_vllm import gloo_group, nccl_group

        return nccl_group if self._gpus else gloo_group

    async def _join_group(self) -> Any:
        """Form the broadcast group: this process is rank 0, engine ``i``'s worker rank ``1 + i``."""
        from slime_core.cluster.ports import free_port

        join, backend = self._transport().join, "nccl" if self._gpus else "gloo"
        self._network.use_node_interface_for_gloo()
        host = self._network.listen_host()
        port, world = free_port(host), 1 + len(self.urls)
        clients = [VLLMClient(url, timeout=CONTROL_TIMEOUT_S, api_key=self._network.token) for url in self.urls]
        try:
            joining = [
                client.collective_rpc("slime_join_group", host, str(port), str(1 + i), str(world), _host(url), backend)
                for i, (client, url) in enumerate(zip(clients, self.urls))
            ]
            group, *_ = await asyncio.gather(asyncio.to_thread(join, host, port, 0, world, host, 120.0), *joining)
        finally:
            await asyncio.gather(*(client.close() for client in clients))
        return group

    async def pull_weights(self, source_dir: str, local_dir: str, version: int) -> None:
        """vLLM has no endpoint that applies a delta (`slime_vllm.plugin` refuses --update-weight-mode delta)."""
        raise RuntimeError("vLLM engines take full weight updates only; drop --update-weight-mode delta")

    async def close_weight_updates(self) -> None:
        """Drop this process's end of the broadcast group, if one was formed. Nothing is asked of
        the engines, one of which may be dead (fault tolerance closes the group for that reason):
        each worker's group is replaced when the next group forms."""
        self._group = None

    async def weight_versions(self) -> list[str]:
        """The weight version each engine serves, in the order of `urls`."""
        return await self._each(lambda client: client.weight_version())

    # ---- health and replacement ---------------------------------------------------------
    def health_problem(self, index: int, timeout: float) -> str | None:
        problem = health_problem(self.urls[index], timeout)
        if problem is None or self._launch is None:
            return problem
        port = int(self.urls[index].rsplit(":", 1)[1])
        return f"{problem}; its log: {engine_log(self._launch[0], index, port)}"

    def restart(self, index: int) -> str:
        if self._launch is None:
            raise RuntimeError("this view of one engine cannot restart it; restart it through the run's engines")
        self.urls[index], self._servers[index] = restart_server(
            self._servers, index, self._launch, kind=KIND, gpus=self._gpus
        )
        return self.urls[index]

    def shutdown(self) -> None:
        servers, self._servers = self._servers, []
        stop_servers(servers)

    async def _each(self, call: Callable[[VLLMClient], Awaitable[Any]]) -> list:
        """``call(client)`` for every engine concurrently; their results, in order."""
        clients = [VLLMClient(url, timeout=CONTROL_TIMEOUT_S, api_key=self._network.token) for url in self.urls]
        try:
            results = await asyncio.gather(*(call(client) for client in clients), return_exceptions=True)
        finally:
            await asyncio.gather(*(client.close() for client in clients))
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results


def nccl_broadcast(gpus: int) -> bool:
    """Whether the broadcast transport is offered on GPUs: one GPU per engine (one worker, one
    rank each), and a driver that can open vLLM's NCCL group (`slime_vllm.nccl_group`)."""
    from slime_vllm.nccl_group import sender_available

    return gpus == 1 and sender_available()


def _host(url: str) -> str:
    """The host of an engine's URL (where its workers bind their end of the group)."""
    return url.split("://", 1)[1].rsplit(":", 1)[0]
