"""Weight updates (tensor buckets and disk) and memory release on a running CPU engine.

The engine is shared with other tests: each test loads the original weights back (which
exercises the disk update too) and resumes what it released."""

from __future__ import annotations

import asyncio
import base64

import httpx
import pytest
import torch

from slime_core.rank.weight_bucket import WeightBucket
from slime_sglang.tensor_payload import decode_bucket, encode_bucket

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_torch_thread")]
PROMPT = [30, 31, 32, 33]


SAMPLING = {"temperature": 1.0, "sampling_seed": 4, "max_new_tokens": 12, "ignore_eos": True}


def sample(url: str) -> dict:
    """A seeded sample with log-probs: it changes with any weight (a random tiny model's greedy
    output just repeats the prompt's last token)."""
    body = {"input_ids": PROMPT, "sampling_params": SAMPLING, "return_logprob": True}
    response = httpx.post(f"{url}/generate", json=body, timeout=60).json()
    response["outputs"] = response["meta_info"].pop("output_token_logprobs")
    return response


def post(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=60)


def test_a_tensor_bucket_update_changes_outputs_and_version(engine_url, other_model_dir, restore_weights):
    from transformers import AutoModelForCausalLM

    before = sample(engine_url)
    named = list(AutoModelForCausalLM.from_pretrained(other_model_dir).named_parameters())
    buckets = [encode_bucket(named[: len(named) // 2]), encode_bucket(named[len(named) // 2 :])]
    response = post(
        engine_url,
        "/update_weights_from_tensor",
        {"serialized_named_tensors": buckets, "weight_version": "v1", "flush_cache": True},
    )
    assert response.status_code == 200 and response.json()["success"], response.text
    after = sample(engine_url)
    assert after["outputs"] != before["outputs"]
    assert after["meta_info"]["weight_version"] == "v1"
    assert httpx.get(f"{engine_url}/server_info").json()["weight_version"] == "v1"
    # The engine now serves the other model's weights exactly: disk gives the same answer.
    assert post(
        engine_url, "/update_weights_from_disk", {"model_path": str(other_model_dir), "weight_version": "v2"}
    ).json()["success"]
    assert sample(engine_url)["outputs"] == after["outputs"]


def test_the_client_sends_a_bucket_as_raw_bytes_and_the_engine_loads_it_alike(
    engine_url, tiny_model_dir, other_model_dir, restore_weights
):
    """EngineClient's form (the safetensors bytes as the body, fields in the query) loads what
    SGLang's JSON form loads; a body that is not a bucket, or a bad flag, is refused."""
    from transformers import AutoModelForCausalLM

    from slime_sglang.client import EngineClient

    assert post(engine_url, "/update_weights_from_disk", {"model_path": str(other_model_dir)}).json()["success"]
    expected = sample(engine_url)["outputs"]
    assert post(engine_url, "/update_weights_from_disk", {"model_path": str(tiny_model_dir)}).json()["success"]
    named = list(AutoModelForCausalLM.from_pretrained(other_model_dir).named_parameters())

    async def update():
        client = EngineClient(engine_url)
        try:
            await client.update_weights_from_tensor(named, "raw-1")
        finally:
            await client.close()

    asyncio.run(update())
    after = sample(engine_url)
    assert after["outputs"] == expected and after["meta_info"]["weight_version"] == "raw-1"
    raw = {"Content-Type": "application/octet-stream"}
    refused = httpx.post(f"{engine_url}/update_weights_from_tensor", content=b"not a bucket", headers=raw, timeout=60)
    assert refused.status_code == 400 and "not a tensor bucket" in refused.json()["message"]
    refused = httpx.post(
        f"{engine_url}/update_weights_from_tensor?flush_cache=yes", content=b"x", headers=raw, timeout=60
    )
    assert refused.status_code == 400 and "flush_cache must be true or false" in refused.text
    assert sample(engine_url)["meta_info"]["weight_version"] == "raw-1"


def test_a_disk_update_changes_outputs_and_back(engine_url, tiny_model_dir, other_model_dir, restore_weights):
    before = sample(engine_url)
    assert post(
        engine_url, "/update_weights_from_disk", {"model_path": str(other_model_dir), "weight_version": "disk-1"}
    ).json()["success"]
    changed = sample(engine_url)
    assert changed["outputs"] != before["outputs"] and changed["meta_info"]["weight_version"] == "disk-1"
    assert post(engine_url, "/update_weights_from_disk", {"model_path": str(tiny_model_dir)}).json()["success"]
    restored = sample(engine_url)
    assert restored["outputs"] == before["outputs"]
    assert restored["meta_info"]["weight_version"] == "disk-1"  # no version given: unchanged, as in SGLang


def test_a_request_running_across_an_update_reports_the_version_at_its_end(engine_url, tiny_model_dir, restore_weights):
    async def scenario():
        async with httpx.AsyncClient(timeout=60) as client:
            body = {
                "input_ids": PROMPT,
                "rid": "across",
                "sampling_params": {"max_new_tokens": 3500, "ignore_eos": True},
            }
            running = asyncio.create_task(client.post(f"{engine_url}/generate", json=body))
            while (await client.get(f"{engine_url}/server_info")).json()["running_requests"] == 0:
                await asyncio.sleep(0.01)
            update = {"model_path": str(tiny_model_dir), "weight_version": "during"}
            assert (await client.post(f"{engine_url}/update_weights_from_disk", json=update)).json()["success"]
            await client.post(f"{engine_url}/abort_request", json={"rid": "across"})
            return (await running).json()

    assert asyncio.run(scenario())["meta_info"]["weight_version"] == "during"


@pytest.mark.parametrize(
    "bad_pair, hint",
    [
        (("model.layers.0.mlp.nonexistent.weight", torch.zeros(3)), "unknown parameter name"),
        (("model.norm.weight", torch.zeros(7)), "wrong shape"),
    ],
)
def test_a_bad_update_is_refused_and_changes_nothing(engine_url, bad_pair, hint):
    before = sample(engine_url)
    good = ("model.embed_tokens.weight", torch.randn(100, 64))
    response = post(
        engine_url,
        "/update_weights_from_tensor",
        {"serialized_named_tensors": [encode_bucket([good, bad_pair])], "weight_version": "bad"},
    )
    assert response.status_code == 400
    assert response.json()["success"] is False and hint in response.json()["message"]
    after = sample(engine_url)
    assert (
        after["outputs"] == before["outputs"]
        and after["meta_info"]["weight_version"] == before["meta_info"]["weight_version"]
    )


def test_unreadable_updates_are_refused_with_a_message(engine_url, tmp_path):
    response = post(engine_url, "/update_weights_from_tensor", {"serialized_named_tensors": ["not base64!"]})
    assert response.status_code == 400 and "encode_bucket" in response.json()["message"]
    response = post(engine_url, "/update_weights_from_disk", {"model_path": str(tmp_path)})
    assert response.status_code == 400 and "no *.safetensors" in response.json()["message"]


def test_release_and_resume_keep_generation_identical(engine_url):
    before = sample(engine_url)

    async def scenario():
        async with httpx.AsyncClient(timeout=60) as client:
            assert (await client.post(f"{engine_url}/release_memory_occupation", json={})).status_code == 200
            info = (await client.get(f"{engine_url}/server_info")).json()
            body = {"input_ids": PROMPT, "sampling_params": SAMPLING, "return_logprob": True}
            waiting = asyncio.create_task(client.post(f"{engine_url}/generate", json=body))
            await asyncio.sleep(0.3)
            held = not waiting.done()
            refused = (
                await client.post(f"{engine_url}/update_weights_from_tensor", json={"serialized_named_tensors": []})
            ).json()
            assert (
                await client.post(
                    f"{engine_url}/resume_memory_occupation", json={"tags": ["weights", "kv_cache", "cuda_graph"]}
                )
            ).status_code == 200
            return info, held, refused, (await waiting).json()

    info, held, refused, during = asyncio.run(scenario())
    assert info["released_memory"] == ["cuda_graph", "kv_cache", "weights"] and held
    assert refused["success"] is False and "resume" in refused["message"]
    assert during["meta_info"]["output_token_logprobs"] == before["outputs"]
    assert sample(engine_url)["outputs"] == before["outputs"]


def test_buckets_round_trip():
    named = [("a.weight", torch.randn(3, 4)), ("b.bias", torch.arange(5, dtype=torch.bfloat16))]
    for bucket in (named, WeightBucket.pack(named)):  # pairs, or packed by a train rank
        decoded = dict(decode_bucket(encode_bucket(bucket)))
        assert sorted(decoded) == ["a.weight", "b.bias"]
        assert all(decoded[name].dtype == t.dtype and torch.equal(decoded[name], t) for name, t in named)
    with pytest.raises(ValueError, match="not a tensor bucket.*encode_bucket"):
        decode_bucket(base64.b64encode(b"not safetensors").decode())


def test_a_lora_adapter_is_merged_into_the_base_and_replaced_by_the_next(
    engine_url, tiny_model_dir, tmp_path, restore_weights
):
    """A pushed LoRA adapter (a tensor bucket, or a peft adapter directory from disk) makes the
    engine serve ``base + scaling * B @ A`` exactly as the merged weights do; the next adapter
    is merged into the base, not into the previous merge; an incomplete adapter is refused."""
    import json

    from safetensors.torch import load_file, save_file

    module = "model.layers.1.self_attn.q_proj"
    weight = load_file(next(tiny_model_dir.glob("*.safetensors")))[f"{module}.weight"]
    generator = torch.Generator().manual_seed(0)
    adapters = [
        (torch.randn(4, weight.shape[1], generator=generator), torch.randn(weight.shape[0], 4) / 4) for _ in "ab"
    ]
    expected = []
    for a, b in adapters:  # what the merged weights serve
        merged = weight.float() + 2.0 * (b @ a)
        assert post(
            engine_url,
            "/update_weights_from_tensor",
            {"serialized_named_tensors": [encode_bucket([(f"{module}.weight", merged)])]},
        ).json()["success"]
        expected.append(sample(engine_url)["outputs"])
    assert expected[0] != expected[1]
    assert post(engine_url, "/update_weights_from_disk", {"model_path": str(tiny_model_dir)}).json()["success"]
    for (a, b), outputs in zip(adapters, expected):
        pairs = [(f"{module}.lora_A.weight", a), (f"{module}.lora_B.weight", b)]
        scaling = (f"{module}.lora_scaling", torch.tensor(2.0, dtype=torch.float64))
        response = post(
            engine_url, "/update_weights_from_tensor", {"serialized_named_tensors": [encode_bucket([*pairs, scaling])]}
        )
        assert response.json()["success"], response.text
        assert sample(engine_url)["outputs"] == outputs
    refused = post(engine_url, "/update_weights_from_tensor", {"serialized_named_tensors": [encode_bucket(pairs[:1])]})
    assert refused.status_code == 400 and f"lacks {module}.lora_B.weight, {module}.lora_scaling" in refused.text
    peft = tmp_path / "adapter"  # what --save-hf writes with LoRA: r 4, alpha 8
    peft.mkdir()
    (peft / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8}))
    a, b = adapters[0]
    save_file(
        {f"base_model.model.{module}.lora_A.weight": a, f"base_model.model.{module}.lora_B.weight": b},
        peft / "adapter_model.safetensors",
    )
    assert post(engine_url, "/update_weights_from_disk", {"model_path": str(peft)}).json()["success"]
    assert sample(engine_url)["outputs"] == expected[0]
