"""Every request slime-sglang's client sends to a real SGLang server fits SGLang's own request
class for that endpoint (fields and required fields), as read from the source of the version
``slime-sglang[server]`` pins (``tests/data/sglang_requests.json``, written by
``scripts/sglang_request_schema.py``: SGLang needs CUDA and its ``io_struct`` imports the
whole server, so the schema is pinned from its source rather than imported). The requests are
captured by a loopback HTTP server standing in for SGLang."""

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web

from slime_core.engine import SamplingParams
from slime_sglang.backend import REAL_SGLANG_TRANSPORTS
from slime_sglang.client import EngineClient

SCHEMA = json.loads((Path(__file__).parent / "data" / "sglang_requests.json").read_text())
#: endpoint -> SGLang's request class (sglang/srt/entrypoints/http_server.py)
ENDPOINTS = {
    "/generate": "GenerateReqInput",
    "/abort_request": "AbortReq",
    "/pause_generation": "PauseGenerationReqInput",
    "/continue_generation": "ContinueGenerationReqInput",
    "/flush_cache": "FlushCacheReqInput",
    "/update_weights_from_disk": "UpdateWeightFromDiskReqInput",
    "/init_weights_update_group": "InitWeightsUpdateGroupReqInput",
    "/update_weights_from_distributed": "UpdateWeightsFromDistributedReqInput",
    "/destroy_weights_update_group": "DestroyWeightsUpdateGroupReqInput",
    "/release_memory_occupation": "ReleaseMemoryOccupationReqInput",
    "/resume_memory_occupation": "ResumeMemoryOccupationReqInput",
}
GENERATED = {
    "text": "4",
    "output_ids": [7],
    "meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[-0.5, 7, None]]},
}


async def capture_every_call(client_calls) -> list[tuple[str, dict]]:
    """Run ``client_calls(client)`` against a stand-in server; the (path, JSON body) it received."""
    received = []

    async def answer(request: web.Request) -> web.Response:
        received.append((request.path, await request.json()))
        return web.json_response(GENERATED if request.path == "/generate" else {"success": True, "message": ""})

    app = web.Application()
    app.router.add_post("/{path:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    client = EngineClient(f"http://127.0.0.1:{port}")
    try:
        await client_calls(client)
    finally:
        await client.close()
        await runner.cleanup()
    return received


async def every_call(client: EngineClient) -> None:
    sampling = SamplingParams(max_new_tokens=4, temperature=0.8, sampling_seed=3)
    await client.generate([1, 2, 3], sampling, rid="r-1")
    await client.generate([1, 2, 3], sampling, image_data=["data:image/png;base64,iVBORw0KGgo="])  # a VLM's prompt
    await client.abort("r-1")
    await client.abort()
    await client.pause_generation()
    await client.flush_cache()
    await client.continue_generation()
    await client.update_weights_from_disk("/ckpt/v3", "3")
    await client.init_weights_update_group("127.0.0.1", 29500, 1, 3, "slime-weights", "nccl")
    await client.update_weights_from_distributed(["w"], ["bfloat16"], [[2, 2]], "slime-weights", "3")
    await client.destroy_weights_update_group("slime-weights")
    await client.release_memory()
    await client.resume_memory()


def test_every_json_request_fits_sglangs_request_class():
    received = asyncio.run(capture_every_call(every_call))
    assert {path for path, _ in received} == set(ENDPOINTS)
    for path, body in received:
        assert_fits(path, body)


def assert_fits(path: str, body: dict) -> None:
    """``body`` has only fields of SGLang's request class for ``path``, and every required one."""
    fields = SCHEMA["classes"][ENDPOINTS[path]]
    unknown = set(body) - set(fields)
    missing = {name for name, required in fields.items() if required} - set(body)
    assert not unknown and not missing, (path, f"unknown {sorted(unknown)}", f"missing {sorted(missing)}")


def test_top_p_replay_asks_for_the_nuclei_in_sglang_s_custom_params(tmp_path, tiny_model_dir):
    """With --rollout-top-p < 1 the rollout's /generate asks for each token's nucleus where
    slime's top-p SGLang patch reads it (``sampling_params.custom_params``, a field of SGLang's
    SamplingParams), in a body that fits GenerateReqInput; evaluation, and top-p 1, do not ask."""
    from slime_core.rollout.default import sampling_params
    from slime_core.testing import make_config

    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    config = make_config(data, tiny_model_dir, rollout_batch_size=1, rollout_top_p=0.9, router="none")
    received = asyncio.run(capture_every_call(lambda client: client.generate([1, 2, 3], sampling_params(config))))
    assert_fits(*received[0])
    assert received[0][1]["sampling_params"]["top_p"] == 0.9
    assert received[0][1]["sampling_params"]["custom_params"] == {"return_top_p_token_ids": True}
    assert sampling_params(config, evaluation=True).custom_params is None
    assert sampling_params(make_config(data, tiny_model_dir, rollout_batch_size=1)).custom_params is None


def test_pause_keeps_running_requests_instead_of_sglangs_default_abort():
    received = asyncio.run(capture_every_call(lambda client: client.pause_generation()))
    assert received == [("/pause_generation", {"mode": "retract"})]  # retract: the cache may be flushed meanwhile


def test_the_tensor_transport_is_not_offered_to_real_sglang_servers(tmp_path, tiny_model_dir):
    """SGLang's tensor endpoint takes MultiprocessingSerializer handles, not safetensors bytes:
    a real SGLang run uses broadcast or disk, and asking for tensor is refused at config time."""
    from slime_core.config import ConfigError
    from slime_core.testing import make_config

    assert SCHEMA["classes"]["UpdateWeightsFromTensorReqInput"]["serialized_named_tensors"] is True
    assert "tensor" not in REAL_SGLANG_TRANSPORTS
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    with pytest.raises(ConfigError, match="a real SGLang server .* use broadcast"):
        make_config(
            data, tiny_model_dir, rollout_batch_size=1, rollout_engine="sglang", update_weight_transport="tensor"
        )


#: the /generate bodies slime's own functions post (THUDM/slime 624b824a): search-r1's and retool's generate
#: (a text prompt), sglang_rollout.generate (ids), the on-policy-distillation reward (prompt log-probs)
SLIME_GENERATE_BODIES = {
    "search-r1 generate": {
        "text": "Question: who wrote Hamlet?\nAnswer: <search>",
        "sampling_params": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 4, "stop": ["</search>"]},
        "return_logprob": True,
    },
    "sglang_rollout.generate": {
        "input_ids": [5, 6, 7],
        "sampling_params": {
            "temperature": 1.0,
            "max_new_tokens": 4,
            "skip_special_tokens": False,
            "no_stop_trim": True,
        },
        "return_logprob": True,
    },
    "on_policy_distillation.reward_func": {
        "input_ids": [5, 6, 7, 8],
        "sampling_params": {"temperature": 1.0, "max_new_tokens": 0, "skip_special_tokens": False},
        "return_logprob": True,
        "logprob_start_len": 0,
    },
}


@pytest.mark.integration
@pytest.mark.parametrize("caller", SLIME_GENERATE_BODIES)
def test_what_slime_s_own_functions_post_fits_sglang_and_the_cpu_engine_answers_it(caller, engine_url):
    import httpx

    body = SLIME_GENERATE_BODIES[caller]
    assert_fits("/generate", body)
    response = httpx.post(f"{engine_url}/generate", json=body, timeout=60)
    assert response.status_code == 200, response.text
    meta = response.json()["meta_info"]
    assert len(meta["output_token_logprobs"]) == meta["completion_tokens"]
    if "logprob_start_len" in body:
        assert [token for _, token, _ in meta["input_token_logprobs"]] == body["input_ids"]
