"""Engines as Ray actors: started, healthy, and gone with their actor (no orphan server)."""

import asyncio
import os
import signal
import time

import pytest
import ray

from slime_core.cluster.engine_servers import EngineServer
from slime_core.engine import SamplingParams
from slime_core.testing import make_config
from slime_sglang.client import EngineClient
from slime_sglang.servers import cpu_engine_command, sglang_command

pytestmark = pytest.mark.integration


def test_cpu_engine_actor_serves_and_dies_with_its_actor(ray_cluster, tiny_model_dir, tmp_path):
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    config = make_config(data, tiny_model_dir, rollout_batch_size=1)
    config.sglang.update({"max_running_requests": 7, "mem_fraction_static": 0.7})  # the first is the CPU engine's too
    actor = ray.remote(num_cpus=0)(EngineServer).remote(config, cpu_engine_command, str(tiny_model_dir))
    url, pid = ray.get([actor.wait_healthy.remote(), actor.pid.remote()])

    async def generate():
        client = EngineClient(url)
        try:
            return await client.generate(
                [5, 6, 7], SamplingParams(max_new_tokens=3, temperature=0.0)
            ), await client.server_info()
        finally:
            await client.close()

    result, info = asyncio.run(generate())
    assert len(result.output_ids) == 3 and info["max_running_requests"] == 7
    ray.kill(actor)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    assert not _alive(pid), "the engine server outlived its actor"


def test_sigterm_stops_the_actor_and_its_server_quietly(ray_cluster, tiny_model_dir, tmp_path):
    """Ray stops actors with SIGTERM; its own handler raised SystemExit wherever the actor was
    (a traceback in the run's output when that was a finalizer). The actor now stops its server
    and exits at once, with no exception."""
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    config = make_config(data, tiny_model_dir, rollout_batch_size=1)
    actor = ray.remote(num_cpus=0)(EngineServer).remote(config, cpu_engine_command, str(tiny_model_dir))
    server_pid, actor_pid = ray.get([actor.pid.remote(), actor.__ray_call__.remote(lambda self: os.getpid())])
    ray.get(actor.wait_healthy.remote())
    os.kill(actor_pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (_alive(server_pid) or _alive(actor_pid)):
        time.sleep(0.2)
    assert not _alive(server_pid) and not _alive(actor_pid)
    with pytest.raises(ray.exceptions.RayActorError) as died:
        ray.get(actor.pid.remote())
    assert "SystemExit" not in str(died.value)  # Ray's handler: "SystemExit is raised (sys.exit is called)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead, just not reaped yet
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_sglang_command_passes_sglang_options_through(tiny_model_dir, tmp_path):
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    config = make_config(data, tiny_model_dir, rollout_batch_size=1, rollout_num_gpus_per_engine=2)
    config.sglang.update({"mem_fraction_static": 0.7, "enable_torch_compile": True, "disable_radix_cache": False})
    command = sglang_command(config, "/models/x", 30001)
    assert command[1:3] == ["-m", "slime_sglang.sglang_server"]  # sglang.launch_server, given the run's keys
    assert command[3:] == [
        "--model-path",
        "/models/x",
        "--host",
        "127.0.0.1",
        "--port",
        "30001",
        "--tp-size",
        "2",
        "--mem-fraction-static",
        "0.7",
        "--enable-torch-compile",
    ]
