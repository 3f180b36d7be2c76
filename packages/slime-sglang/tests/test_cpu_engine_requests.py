"""What the CPU engine answers besides generations: refusals of malformed requests (400
with a message saying how to fix them), health, info and cache endpoints."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "body, hint",
    [
        ({}, "input_ids is missing"),
        ({"input_ids": []}, "non-empty list"),
        ({"input_ids": [5, 100]}, "outside the vocabulary [0, 100)"),
        ({"input_ids": [[5, 6], [7]], "rid": "one"}, "rid must be a list of one id per prompt"),
        ({"input_ids": [5] * 5000}, "context length is 4096"),
        ({"input_ids": [5], "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens must be >= 0"),
        ({"input_ids": [5], "sampling_params": {"temprature": 0.5}}, "unknown sampling param 'temprature'"),
        ({"input_ids": [5], "sampling_params": {"top_p": 0}}, "top_p must be in (0, 1]"),
        ({"input_ids": [5], "sampling_params": {"top_k": 0}}, "top_k must be -1 (off) or at least 1"),
        ({"input_ids": [5], "sampling_params": {"stop": [""]}}, "stop must be"),
        ({"input_ids": [5], "sampling_params": {"stop_token_ids": [7, 999]}}, "stop_token_ids has ids outside"),
        ({"input_ids": [5], "sampling_params": {"sampling_seed": "7"}}, "sampling_seed must be an integer"),
        (
            {"input_ids": [5], "image_data": ["data:image/png;base64,AAAA"]},
            "is a text-only model, which takes no images",
        ),
        ({"input_ids": [5], "prompt": "hi"}, "unknown request field 'prompt'"),
        ({"input_ids": [5], "rid": 7}, "rid must be a string"),
        ({"input_ids": [5], "sampling_params": {"n": 0}}, "sampling_params.n must be at least 1"),
        ({"input_ids": [5], "sampling_params": {"n": "8"}}, "n must be an integer"),
        (
            {"input_ids": [5], "sampling_params": {"custom_params": {"return_top_p": True}}},
            "unknown custom param 'return_top_p'",
        ),
        ({"input_ids": [5], "sampling_params": {"custom_params": [1]}}, "custom_params must be a JSON object"),
        (
            {"input_ids": [5], "sampling_params": {"return_top_p_token_ids": True}},
            "unknown sampling param 'return_top_p_token_ids'",
        ),
    ],
)
def test_malformed_generate_requests_get_400_with_the_fix(engine_url, body, hint):
    response = httpx.post(f"{engine_url}/generate", json=body, timeout=30)
    assert response.status_code == 400
    assert hint in response.json()["error"]


@pytest.mark.parametrize(
    "path, body, hint",
    [
        ("/generate", "{not json", "not valid JSON"),
        ("/generate", "[1, 2]", "must be a JSON object"),
        ("/abort_request", "{}", '{"rid": "<request id>"} or {"abort_all": true}'),
        ("/pause_generation", '{"mode": "later"}', "mode must be one of"),
        ("/release_memory_occupation", '{"tags": ["gpu"]}', "tags must be a list drawn from"),
        ("/update_weights_from_disk", '{"path": "/x"}', "unknown field for /update_weights_from_disk 'path'"),
        ("/update_weights_from_tensor", '{"serialized_named_tensors": "abc"}', "must be a list of strings"),
    ],
)
def test_malformed_control_requests_get_400_with_the_fix(engine_url, path, body, hint):
    response = httpx.post(f"{engine_url}{path}", content=body, timeout=30)
    assert response.status_code == 400
    assert hint in response.json()["error"]


def test_unknown_paths_and_methods_answer_json(engine_url):
    assert httpx.get(f"{engine_url}/no_such_thing").json() == {"error": "Not Found: GET /no_such_thing"}
    assert httpx.get(f"{engine_url}/generate").status_code == 405


def test_health_info_and_cache_endpoints(engine_url, tiny_model_dir):
    assert httpx.get(f"{engine_url}/health").status_code == 200
    assert httpx.get(f"{engine_url}/health_generate", timeout=30).status_code == 200
    for path in ("/server_info", "/get_server_info"):
        info = httpx.get(f"{engine_url}{path}").json()
        assert info["model_path"] == str(tiny_model_dir) and info["max_running_requests"] == 256
        assert {"weight_version", "running_requests", "paused"} <= set(info)
    for path in ("/model_info", "/get_model_info"):
        assert httpx.get(f"{engine_url}{path}").json()["is_generation"] is True
    assert httpx.post(f"{engine_url}/flush_cache").status_code == 200
    assert httpx.get(f"{engine_url}/flush_cache").status_code == 200


def test_a_duplicate_request_id_in_flight_is_refused(engine_url):
    import asyncio

    async def scenario():
        async with httpx.AsyncClient(timeout=30) as client:
            body = {"input_ids": [5], "rid": "twice", "sampling_params": {"max_new_tokens": 3500, "ignore_eos": True}}
            first = asyncio.create_task(client.post(f"{engine_url}/generate", json=body))
            while (await client.get(f"{engine_url}/server_info")).json()["running_requests"] == 0:
                await asyncio.sleep(0.01)
            second = await client.post(f"{engine_url}/generate", json=body)
            await client.post(f"{engine_url}/abort_request", json={"rid": "twice"})
            return second, (await first).json()

    second, first = asyncio.run(scenario())
    assert second.status_code == 400 and "already in flight" in second.json()["error"]
    assert first["meta_info"]["finish_reason"]["type"] == "abort"
