"""The engine group: CPU engines started as Ray actors, external engines, and control calls
sent to every engine."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from slime_core.cluster.ports import free_port
from slime_core.testing import make_config
from slime_sglang.engine_group import EngineGroup

pytestmark = pytest.mark.integration


@pytest.fixture
def config_for(tmp_path, tiny_model_dir):
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    return lambda **overrides: make_config(data, tiny_model_dir, rollout_batch_size=1, **overrides)


def serving_pids(urls: list[str]) -> list[int]:
    """Processes (not zombies) whose command line serves one of ``urls``' ports."""
    ports = {url.rsplit(":", 1)[1] for url in urls}
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().split(")")[-1].split()[0]
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError, PermissionError):
            continue
        if state != "Z" and b"serve" in argv and any(p.encode() in argv for p in ports):
            found.append(int(proc.name))
    return found


def server_infos(urls: list[str]) -> list[dict]:
    return [httpx.get(f"{url}/server_info", timeout=10).json() for url in urls]


def test_started_cpu_engines_take_every_control_call_and_leave_nothing_behind(
    ray_cluster, config_for, tiny_model_dir, other_model_dir
):
    group = EngineGroup.start(config_for(rollout_engine="cpu", rollout_num_gpus=2), str(tiny_model_dir))
    try:
        assert len(set(group.urls)) == 2 and len(serving_pids(group.urls)) == 2

        async def calls():
            await group.pause()
            paused = [info["paused"] for info in server_infos(group.urls)]
            await group.resume_generation()
            await group.release_memory()
            released = [info["released_memory"] for info in server_infos(group.urls)]
            await group.resume_memory()
            await group.flush_cache()
            await group.update_weights_from_disk(str(other_model_dir), "1")
            from_disk = await group.weight_versions()
            await group.update_weights_from_tensor([("model.norm.weight", _ones(64))], "2")
            return paused, released, from_disk, await group.weight_versions()

        paused, released, from_disk, from_tensor = asyncio.run(calls())
        assert paused == [True, True] and all(released)
        assert from_disk == ["1", "1"] and from_tensor == ["2", "2"]
        assert [(info["paused"], info["released_memory"]) for info in server_infos(group.urls)] == [(False, [])] * 2
    finally:
        group.shutdown()
    group.shutdown()  # idempotent
    assert serving_pids(group.urls) == []


def test_an_engine_that_fails_to_start_is_named_with_its_log(ray_cluster, config_for, tmp_path):
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    with pytest.raises(
        RuntimeError,
        match=r"rollout engine 0 of 1 \(cpu\) did not start: .*exited with code 2.*"
        r"log: .*slime-engine-\d+\.log.*has no config\.json",
    ):
        EngineGroup.start(config_for(rollout_engine="cpu", rollout_num_gpus=1), str(not_a_model))


def test_external_engines_are_used_as_they_are_and_never_shut_down(config_for, cpu_engines):
    addresses = [url.removeprefix("http://") for url in cpu_engines]
    group = EngineGroup.start(config_for(rollout_external_engine_addrs=addresses), "/not/used")
    assert group.urls == cpu_engines
    assert asyncio.run(group.weight_versions()) == [info["weight_version"] for info in server_infos(cpu_engines)]
    group.shutdown()
    assert all(httpx.get(f"{url}/health", timeout=5).status_code == 200 for url in cpu_engines)


def test_an_unreachable_external_engine_is_a_clear_error(config_for, cpu_engines):
    dead = f"127.0.0.1:{free_port()}"
    config = config_for(rollout_external_engine_addrs=[cpu_engines[0].removeprefix("http://"), dead])
    with pytest.raises(
        RuntimeError,
        match=rf"external engine http://{dead} did not answer /health \(ConnectError.*"
        r"Start the engines first, or fix --rollout-external-engine-addrs",
    ):
        EngineGroup.start(config, "/not/used")


def _ones(size: int):
    import torch

    return torch.ones(size)
