"""The CPU engine's running batch on the new architectures: Qwen3-Next (gated delta-net
linear attention, whose cache is a recurrent state per request, mixed with gated full
attention) and GLM-5 (MLA with DeepSeek sparse attention, whose indexer keeps keys of its
own). Requests of different lengths are prefilled together, join a running batch, and leave
it; every token's log-prob must equal a plain transformers forward of that request alone."""

import asyncio

import pytest
import torch

from slime_core.testing import log_probs_alone
from slime_core.tools.tiny_models import build_tiny_model
from slime_sglang.cpu_engine import batch as batching
from slime_sglang.cpu_engine.request import GenerateRequest, SamplingParams
from slime_sglang.cpu_engine.weights import load_model

FAMILIES = ["qwen3_next", "glm_moe_dsa"]


@pytest.fixture(scope="module", params=FAMILIES)
def served(request, tmp_path_factory):
    """(model directory, the model as the CPU engine loads it)."""
    model_dir = build_tiny_model(tmp_path_factory.mktemp(request.param), request.param, hidden_size=32)
    return model_dir, load_model(str(model_dir))[0]


def greedy(requests: list[GenerateRequest], logits: torch.Tensor) -> None:
    """Append each request's greedy token and its log-prob, as the engine does at temperature 0,
    but never ``<pad>`` (id 0): the tiny models' embedding of it is zero, so a GLM-5 indexer query
    after it scores every key 0, and top-k among ties depends on the tensor's shape (transformers'
    own cached decoding then disagrees with its full forward)."""
    log_probs = logits.float().log_softmax(-1)
    for request, row in zip(requests, log_probs):
        token = int(row[1:].argmax()) + 1
        request.output_ids.append(token)
        request.output_logprobs.append(row[token].item())


def request(rid: str, prompt: list[int]) -> GenerateRequest:
    return GenerateRequest(rid=rid, input_ids=prompt, params=SamplingParams(temperature=0.0), return_logprob=True)


def decode(model, batch, steps: int) -> None:
    for _ in range(steps):
        greedy(batch.requests, batching.decode(model, batch))


def test_requests_that_join_and_leave_the_batch_score_as_if_alone(served):
    """Prompts of 3, 11 and 3 tokens (the last two share one prefill row), one of 6 joining after 3
    steps, one of 14 joining after the longest has left: about 20 positions per request, past
    the tiny GLM-5's 8-key sparse-attention budget and the gated delta-net's 4-wide convolution."""
    _, model = served
    a, b, c = request("a", [5, 9, 13]), request("b", [20 + i for i in range(11)]), request("c", [5, 9, 13])
    with torch.no_grad():
        batch, logits = batching.prefill(model, [a, b, c])
        greedy(batch.requests, logits)
        decode(model, batch, 3)
        d = request("d", [40, 41, 42, 43, 44, 45])
        joining, logits = batching.prefill(model, [d])
        greedy([d], logits)
        batch = batching.merge(batch, joining)
        decode(model, batch, 5)
        batch = batching.keep(batch, [0, 2, 3])  # b leaves: its padding-only columns go
        decode(model, batch, 4)
        e = request("e", [60 + i for i in range(14)])
        joining, logits = batching.prefill(model, [e])
        greedy([e], logits)
        batch = batching.merge(batch, joining)
        decode(model, batch, 6)
    assert a.output_ids == c.output_ids
    for r in (a, b, c, d, e):
        expected = log_probs_alone(model, r.input_ids + r.output_ids, len(r.output_ids))
        torch.testing.assert_close(
            torch.tensor(r.output_logprobs),
            expected,
            rtol=0,
            atol=1e-4,
            msg=f"request {r.rid} of {model.config.model_type}",
        )


def test_the_served_engine_answers_with_the_log_probs_of_the_weights_in_force(served, tmp_path):
    """The running engine (its scheduler thread) on concurrent requests of different lengths,
    before and after a weight update from disk: the log-probs are those of a plain forward of
    the weights that generated them."""
    from slime_core.tools.tiny_models import perturbed_copy
    from slime_sglang.cpu_engine.control import update_weights_from_disk
    from slime_sglang.cpu_engine.engine import load_engine
    from slime_sglang.cpu_engine.request import parse_generate

    model_dir, original = served
    updated_dir = perturbed_copy(model_dir, tmp_path / "updated", scale=0.2)
    updated = load_model(str(updated_dir))[0]
    engine = load_engine(str(model_dir), max_running_requests=8)
    prompts = [[7, 8, 9], [30 + i for i in range(10)], [7, 8, 9], [50, 51, 52, 53, 54, 55]]

    async def generate_all() -> list[dict]:
        bodies = [
            {
                "input_ids": p,
                "return_logprob": True,
                "sampling_params": {
                    "temperature": 0,
                    "max_new_tokens": 6 + 3 * i,
                    "ignore_eos": True,
                    "stop_token_ids": [0],
                },
            }  # see `greedy`
            for i, p in enumerate(prompts)
        ]
        return await asyncio.gather(*(engine.generate(parse_generate(b, engine.vocab_size, 128)) for b in bodies))

    async def run() -> tuple[list[dict], list[dict]]:
        before = await generate_all()
        answer = await update_weights_from_disk(engine, {"model_path": str(updated_dir), "weight_version": "2"})
        assert answer["success"], answer
        return before, await generate_all()

    before, after = asyncio.run(run())
    for weights, answers in ((original, before), (updated, after)):
        for prompt, result in zip(prompts, answers):
            got = [entry[0] for entry in result["meta_info"]["output_token_logprobs"]]
            expected = log_probs_alone(weights, prompt + result["output_ids"], len(result["output_ids"]))
            torch.testing.assert_close(torch.tensor(got), expected, rtol=0, atol=1e-4)
    assert [r["meta_info"]["weight_version"] for r in after] == ["2"] * len(prompts)


def test_a_cache_layer_the_batch_cannot_hold_is_named_when_the_model_loads():
    from slime_core.tools.tiny_models import tiny_config
    from slime_sglang.cpu_engine.layer_cache import unsupported_layers

    sliding = tiny_config("qwen3", hidden_size=32)
    sliding.layer_types, sliding.sliding_window = ["sliding_attention", "full_attention"], 8
    assert unsupported_layers(sliding) == ["DynamicSlidingWindowLayer"]
    assert all(unsupported_layers(tiny_config(family, hidden_size=32)) == [] for family in FAMILIES + ["deepseek_v3"])
