"""Weight updates by collective broadcast (gloo) into running CPU engines, through SGLang's
``/init_weights_update_group``, ``/update_weights_from_distributed`` and
``/destroy_weights_update_group``; this test process is the sender (rank 0)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import torch

from slime_core.cluster.ports import free_port
from slime_core.engine import SamplingParams
from slime_sglang.client import EngineClient, EngineError
from slime_sglang.weight_broadcast import WeightBroadcaster, close_group, describe, in_daemon_thread, open_group, send

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_torch_thread", "restore_weights")]
SEEDED = SamplingParams(max_new_tokens=12, temperature=1.0, sampling_seed=4)
PROMPT = [30, 31, 32, 33]


async def sample(url: str) -> tuple[list[int], list[float], str]:
    """A seeded sample's tokens, log-probs and weight version: they change with any weight."""
    client = EngineClient(url)
    try:
        result = await client.generate(PROMPT, SEEDED)
    finally:
        await client.close()
    return result.output_ids, result.log_probs, result.weight_version


def hf_weights(model_dir) -> list[tuple[str, torch.Tensor]]:
    from transformers import AutoModelForCausalLM

    return [(name, p.detach()) for name, p in AutoModelForCausalLM.from_pretrained(model_dir).named_parameters()]


def test_a_broadcast_update_equals_loading_the_same_weights_from_disk(cpu_engines, other_model_dir):
    weights = hf_weights(other_model_dir)

    async def scenario():
        before = await sample(cpu_engines[0])
        async with await WeightBroadcaster.connect(cpu_engines, timeout_s=30) as broadcaster:
            half = len(weights) // 2
            await broadcaster.broadcast(weights[:half], "3")  # two buckets, as a trainer sends them
            await broadcaster.broadcast(weights[half:], "3")
        broadcast = [await sample(url) for url in cpu_engines]
        client = EngineClient(cpu_engines[1])
        await client.update_weights_from_disk(str(other_model_dir), "from-disk")
        await client.close()
        return before, broadcast, await sample(cpu_engines[1])

    before, broadcast, from_disk = asyncio.run(scenario())
    assert broadcast[0][:2] == broadcast[1][:2] == from_disk[:2]  # same tokens and log-probs, exactly
    assert broadcast[0][1] != before[1]
    assert [version for *_, version in broadcast] == ["3", "3"] and from_disk[2] == "from-disk"


def test_the_engine_serves_while_it_joins_and_receives(engine_url, tiny_model_dir):
    """Joining and receiving wait on their own threads: the engine answers and generates meanwhile."""
    name, port = f"probe-{uuid.uuid4().hex[:6]}", free_port()
    norm = dict(hf_weights(tiny_model_dir))["model.norm.weight"]

    async def generates(client: EngineClient) -> bool:
        result = await asyncio.wait_for(client.generate([5, 6, 7], SamplingParams(max_new_tokens=3, temperature=0)), 10)
        return len(result.output_ids) > 0

    async def scenario():
        client = EngineClient(engine_url, timeout=30)
        joining = asyncio.ensure_future(client.init_weights_update_group("127.0.0.1", port, 1, 2, name, "gloo"))
        await asyncio.sleep(0.5)  # the engine waits for rank 0, which has not come yet
        served_while_joining = not joining.done() and await generates(client)
        group = await in_daemon_thread(open_group, "127.0.0.1", port, 0, 2, name, "gloo", 30.0)
        await joining
        updating = asyncio.ensure_future(
            client.update_weights_from_distributed(*describe([("model.norm.weight", norm)]), name, "probe-1")
        )
        await asyncio.sleep(0.3)  # the engine waits for the tensor, which has not been sent yet
        served_while_receiving = not updating.done() and await generates(client)
        await in_daemon_thread(send, group, [norm])
        await updating
        version = await client.weight_version()
        await client.destroy_weights_update_group(name)
        close_group(group)
        groups_left = (await client.server_info())["weight_update_groups"]
        await client.close()
        return served_while_joining, served_while_receiving, version, groups_left

    assert asyncio.run(scenario()) == (True, True, "probe-1", [])


@pytest.mark.parametrize(
    "bad_pair, hint",
    [
        (("model.layers.0.mlp.nonexistent.weight", torch.zeros(3)), "unknown parameter name"),
        (("model.norm.weight", torch.zeros(7)), "wrong shape"),
    ],
)
def test_a_mismatched_bucket_is_refused_at_once_and_changes_nothing(engine_url, bad_pair, hint):
    async def scenario():
        before = await sample(engine_url)
        async with await WeightBroadcaster.connect([engine_url], timeout_s=30) as broadcaster:
            started = time.monotonic()
            with pytest.raises(EngineError, match=hint):
                await broadcaster.broadcast([("model.embed_tokens.weight", torch.randn(100, 64)), bad_pair], "bad")
            seconds = time.monotonic() - started
            with pytest.raises(RuntimeError, match="out of step.*connect a new WeightBroadcaster"):
                await broadcaster.broadcast([("model.norm.weight", torch.ones(64))], "next")
        return before, await sample(engine_url), seconds

    before, after, seconds = asyncio.run(scenario())
    assert after == before and seconds < 10


def test_an_engine_that_refuses_to_join_is_an_error_at_once(engine_url):
    async def connect():
        await WeightBroadcaster.connect([engine_url], backend="nccl", timeout_s=30)

    started = time.monotonic()
    with pytest.raises(EngineError, match="receives weights over gloo"):
        asyncio.run(connect())
    assert time.monotonic() - started < 10  # not the 30 s the group's rendezvous would wait
