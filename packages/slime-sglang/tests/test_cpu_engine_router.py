"""The real sglang-router (the Rust load balancer) in front of two CPU engines, started by
slime-router's launcher as a run starts it."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.integration


def finished(url: str) -> int:
    return httpx.get(f"{url}/server_info", timeout=10).json()["finished_requests"]


def test_the_router_spreads_generate_requests_over_both_engines(cpu_engines, tiny_model_dir, tmp_path):
    pytest.importorskip("slime_router")
    from slime_core.testing import make_config
    from slime_router.launch import start_router

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "1+1="}\n')
    config = make_config(
        prompts, tiny_model_dir, rollout_batch_size=1, router_policy="round_robin", output_dir=str(tmp_path)
    )
    with start_router(config, cpu_engines) as router:
        url = router.url
        before = [finished(engine) for engine in cpu_engines]
        body = {
            "input_ids": [5, 6, 7],
            "return_logprob": True,
            "sampling_params": {"temperature": 0.5, "max_new_tokens": 5, "ignore_eos": True},
        }
        answers = [httpx.post(f"{url}/generate", json=body, timeout=60) for _ in range(6)]
        served = [finished(engine) - count for engine, count in zip(cpu_engines, before)]
        refused = httpx.post(f"{url}/generate", json={"input_ids": [5, 100000]}, timeout=60)
        group = httpx.post(
            f"{url}/generate", json={**body, "sampling_params": {**body["sampling_params"], "n": 4}}, timeout=60
        )
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    for answer in map(httpx.Response.json, answers):
        meta = answer["meta_info"]
        assert len(answer["output_ids"]) == meta["completion_tokens"] == 5
        assert meta["finish_reason"] == {"type": "length", "length": 5} and meta["weight_version"] == "default"
        assert [token for _, token, _ in meta["output_token_logprobs"]] == answer["output_ids"]
    assert min(served) >= 1 and sum(served) >= 6, served
    assert refused.status_code == 400 and "outside the vocabulary" in refused.text
    # a GRPO group as one request (sampling_params.n) passes the router: four samples come back
    assert group.status_code == 200, group.text
    assert [len(sample["output_ids"]) for sample in group.json()] == [5] * 4
