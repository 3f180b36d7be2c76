"""slime-router in front of slime's vLLM servers: its middleware front and the real sglang-router,
started as a run starts them (`slime_router.launch.start_router`, the run's token as the admin key
of a run on one node), over the session's two vLLM servers. An agent's multi-turn chat through the
``sessions`` middleware is recorded token-exact and stays on one engine (its routing key), and the
``metrics`` middleware counts it. (A ``slime run`` behind the chain is
``tests/test_vllm_loop.py``'s GRPO run.)"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from slime_core.engine import SamplingParams
from slime_core.testing import make_config
from slime_router.launch import start_router
from slime_router.sessions.client import session_sample
from slime_vllm.client import VLLMClient

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CHAIN = ["metrics", "sessions", "retry"]


def _served(pair) -> list[int]:
    """``POST /generate`` answered so far by each of the pair's servers (their access logs)."""
    logs = [pair.log_dir / "engines" / f"engine_{i}.log" for i in range(len(pair.urls))]
    return [log.read_text().count("POST /generate") for log in logs]


def _chat(router_url: str, messages: list[dict]) -> dict:
    """One greedy turn of session ``ep-1`` as an agent sends it (no token: generation is open on one node)."""
    body = {"messages": messages, "max_tokens": 6, "temperature": 0.0, "logprobs": True}
    answer = httpx.post(f"{router_url}/v1/chat/completions", json=body, headers={"X-Session-Id": "ep-1"}, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()["choices"][0]["message"]


def test_an_agent_s_session_through_slime_router_on_vllm_is_exact_sticky_and_counted(
    vllm_server_pair, vllm_model_dir, tmp_path
):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "1+1="}\n')
    config = make_config(prompts, vllm_model_dir, rollout_batch_size=1, router_middleware=CHAIN)
    config = config.replace(output_dir=str(tmp_path), network=vllm_server_pair._network)
    served = _served(vllm_server_pair)
    with start_router(config, vllm_server_pair.urls) as router:
        messages = [{"role": "user", "content": "1+1="}]
        reply = _chat(router.url, messages)
        _chat(router.url, [*messages, reply, {"role": "user", "content": "and 2+2="}])
        sample = session_sample(router.url, "ep-1", api_key=config.network.token)
        summary = router.metrics()
    turns = [now - was for now, was in zip(_served(vllm_server_pair), served)]
    assert sorted(turns) == [0, 2], turns  # both turns on one engine: the session's routing key
    engine = vllm_server_pair.urls[turns.index(2)]
    # the last turn, sent to that engine directly, draws the recorded tokens with the recorded log-probs
    last = sample.loss_mask[::-1].index(0)
    prompt, reply_ids = sample.tokens[:-last], sample.tokens[-last:]

    async def again():
        client = VLLMClient(engine, api_key=config.network.token)
        try:
            return await client.generate(prompt, SamplingParams(max_new_tokens=6, temperature=0.0))
        finally:
            await client.close()

    direct = asyncio.run(again())
    assert direct.output_ids == reply_ids
    assert max(abs(a - b) for a, b in zip(direct.log_probs, sample.rollout_log_probs[-last:])) < 1e-5
    assert summary["router/requests"] == 2 and summary["router/errors"] == 0
    assert summary["router/completion_tokens"] == sample.loss_mask.count(1)
