"""The CPU engine's generation, through HTTP against a real ``slime engine serve`` process:
agreement with plain transformers and with training's log-probs (top-p replay included),
continuous batching, stop conditions, seeds, abort and pause."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import torch

from slime_core.algorithms import log_probs_from_logits, nucleus_keep_mask
from slime_core.engine import decode_int32s

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_torch_thread")]
EOS = 1


def generate(url: str, input_ids: list[int], return_logprob: bool = False, **params) -> dict:
    body = {"input_ids": input_ids, "sampling_params": params, "return_logprob": return_logprob}
    response = httpx.post(f"{url}/generate", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def reference_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """Greedy decode with full forwards of the plain transformers model, up to and with EOS."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(max_new_tokens):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
            if ids[-1] == EOS:
                break
    return ids[len(prompt) :]


def training_log_probs(model, prompt: list[int], output: list[int], temperature: float) -> torch.Tensor:
    """Log-probs of ``output`` as the trainer computes them: one forward of prompt + output."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + output])).logits[0, len(prompt) - 1 : -1]
    return log_probs_from_logits(logits, torch.tensor(output), temperature)


def server_info(url: str) -> dict:
    return httpx.get(f"{url}/server_info", timeout=10).json()


def test_greedy_output_and_log_probs_agree_with_transformers_and_training(engine_url, tokenizer, reference_model):
    prompt = tokenizer.encode("The quick brown fox")
    out = generate(engine_url, prompt, return_logprob=True, temperature=0, max_new_tokens=24)
    meta = out["meta_info"]
    assert out["output_ids"] == reference_greedy(reference_model, prompt, 24)
    assert meta["prompt_tokens"] == len(prompt) and meta["completion_tokens"] == len(out["output_ids"])
    assert meta["weight_version"] == "default"
    assert out["text"] == tokenizer.decode(out["output_ids"], skip_special_tokens=True)
    logprobs = meta["output_token_logprobs"]
    assert [token for _, token, _ in logprobs] == out["output_ids"]
    expected = training_log_probs(reference_model, prompt, out["output_ids"], temperature=1.0)  # greedy -> 1
    torch.testing.assert_close(torch.tensor([lp for lp, _, _ in logprobs]), expected, atol=1e-4, rtol=0)


def test_sampled_log_probs_use_the_temperature(engine_url, tokenizer, reference_model):
    prompt = tokenizer.encode("Once upon a time")
    out = generate(engine_url, prompt, return_logprob=True, temperature=0.7, max_new_tokens=20, sampling_seed=3)
    engine = torch.tensor([lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]])
    torch.testing.assert_close(
        engine, training_log_probs(reference_model, prompt, out["output_ids"], 0.7), atol=1e-4, rtol=0
    )


def test_top_p_replay_returns_the_nuclei_drawn_from_and_log_probs_over_them(engine_url, tokenizer, reference_model):
    """With ``custom_params.return_top_p_token_ids`` each output token comes with its nucleus:
    the smallest most-probable set reaching top_p under the reference model, holding the token;
    the log-probs are training's renormalised over those nuclei (and differ from the
    whole-vocabulary ones a request without replay gets)."""
    prompt = tokenizer.encode("Once upon a time")
    params = dict(temperature=0.8, top_p=0.7, max_new_tokens=16, sampling_seed=5)
    out = generate(engine_url, prompt, return_logprob=True, **params, custom_params={"return_top_p_token_ids": True})
    meta, output = out["meta_info"], out["output_ids"]
    ids, offsets = decode_int32s(meta["top_p_token_ids"]), decode_int32s(meta["top_p_token_offsets"])
    nuclei = [ids[a:b] for a, b in zip(offsets, offsets[1:])]
    with torch.no_grad():
        logits = reference_model(torch.tensor([prompt + output])).logits[0, len(prompt) - 1 : -1]
    for token, nucleus, p in zip(output, nuclei, torch.softmax(logits / 0.8, -1), strict=True):
        assert token in nucleus
        ranked = p.argsort(descending=True)
        assert sorted(nucleus) == sorted(ranked[: int((p[ranked].cumsum(0) - p[ranked] <= 0.7).sum())].tolist())
    assert any(len(nucleus) > 1 for nucleus in nuclei)
    engine = torch.tensor([lp for lp, _, _ in meta["output_token_logprobs"]])
    keep = nucleus_keep_mask([ids], [offsets], torch.tensor(output), logits.shape[-1])
    torch.testing.assert_close(
        engine, log_probs_from_logits(logits, torch.tensor(output), 0.8, keep_mask=keep), atol=1e-4, rtol=0
    )
    plain = generate(engine_url, prompt, return_logprob=True, **params)
    assert plain["output_ids"] == output and "top_p_token_ids" not in plain["meta_info"]
    whole_vocabulary = torch.tensor([lp for lp, _, _ in plain["meta_info"]["output_token_logprobs"]])
    torch.testing.assert_close(
        whole_vocabulary, training_log_probs(reference_model, prompt, output, 0.8), atol=1e-4, rtol=0
    )
    assert (engine - whole_vocabulary).max() > 0.05


def test_concurrent_requests_each_match_their_solo_greedy_decode(engine_url, tokenizer, reference_model):
    """Prompts of different lengths join and leave the running batch at different steps;
    left padding and position ids must leave every row's computation as if it ran alone."""
    prompts = [tokenizer.encode(text) for text in ("a", "hello there", "x" * 30, "What is 2+2?")]
    lengths = [30, 5, 17, 11]

    async def run_all():
        async with httpx.AsyncClient(timeout=60) as client:

            async def one(prompt, n, delay):
                await asyncio.sleep(delay)
                body = {"input_ids": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": n}}
                return (await client.post(f"{engine_url}/generate", json=body)).json()

            return await asyncio.gather(*(one(p, n, 0.01 * i) for i, (p, n) in enumerate(zip(prompts, lengths))))

    for prompt, n, out in zip(prompts, lengths, asyncio.run(run_all())):
        assert out["output_ids"] == reference_greedy(reference_model, prompt, n)


def test_a_group_sharing_its_prompt_samples_as_each_request_alone(engine_url, tokenizer):
    """The samples of a GRPO group (one prompt, several seeds) arrive together and share one
    prefill row, next to a longer prompt: each gets the tokens and log-probs it gets alone."""
    group, other = tokenizer.encode("What is 2+2?"), tokenizer.encode("x" * 30)
    requests = [(group, seed) for seed in range(6)] + [(other, 9)]
    params = {"temperature": 1.0, "max_new_tokens": 12, "ignore_eos": True}

    async def together():
        async with httpx.AsyncClient(timeout=60) as client:

            async def one(prompt, seed):
                body = {
                    "input_ids": prompt,
                    "return_logprob": True,
                    "sampling_params": {**params, "sampling_seed": seed},
                }
                return (await client.post(f"{engine_url}/generate", json=body)).json()

            return await asyncio.gather(*(one(p, seed) for p, seed in requests))

    outputs = asyncio.run(together())
    assert len({tuple(out["output_ids"]) for out in outputs[:6]}) > 1  # the seeds sampled different answers
    for (prompt, seed), out in zip(requests, outputs):
        alone = generate(engine_url, prompt, return_logprob=True, sampling_seed=seed, **params)
        assert out["output_ids"] == alone["output_ids"]
        logprobs = [[lp for lp, _, _ in answer["meta_info"]["output_token_logprobs"]] for answer in (out, alone)]
        torch.testing.assert_close(torch.tensor(logprobs[0]), torch.tensor(logprobs[1]), atol=1e-4, rtol=0)


def test_a_short_request_joins_a_running_long_one_and_finishes_first(engine_url, tokenizer):
    """Continuous batching: the short request runs beside the long one (2 running) and
    answers while the long one still generates; the long one, aborted, answers with what it has."""
    prompt = tokenizer.encode("count:")

    async def scenario():
        async with httpx.AsyncClient(timeout=60) as client:
            long_body = {
                "input_ids": prompt,
                "rid": "long-one",
                "sampling_params": {"max_new_tokens": 3500, "ignore_eos": True},
            }
            long_task = asyncio.create_task(client.post(f"{engine_url}/generate", json=long_body))
            await _until(client, engine_url, lambda info: info["running_requests"] == 1)
            short_body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}
            short_task = asyncio.create_task(client.post(f"{engine_url}/generate", json=short_body))
            running_seen = set()
            while not short_task.done():
                running_seen.add((await client.get(f"{engine_url}/server_info")).json()["running_requests"])
            long_done_before_short = long_task.done()
            await client.post(f"{engine_url}/abort_request", json={"rid": "long-one"})
            return (await short_task).json(), (await long_task).json(), running_seen, long_done_before_short

    short, long, running_seen, long_done_before_short = asyncio.run(scenario())
    assert not long_done_before_short
    assert 2 in running_seen
    assert short["meta_info"]["finish_reason"] == {"type": "length", "length": 40}
    assert long["meta_info"]["finish_reason"]["type"] == "abort"
    assert 40 < long["meta_info"]["completion_tokens"] == len(long["output_ids"]) < 3500
    assert server_info(engine_url)["running_requests"] == 0


def test_abort_all_answers_every_request_with_its_partial_output(engine_url):
    async def scenario():
        async with httpx.AsyncClient(timeout=60) as client:
            body = {"input_ids": [10, 11, 12], "sampling_params": {"max_new_tokens": 3500, "ignore_eos": True}}
            tasks = [asyncio.create_task(client.post(f"{engine_url}/generate", json=body)) for _ in range(3)]
            await _until(client, engine_url, lambda info: info["running_requests"] == 3)
            assert (await client.post(f"{engine_url}/abort_request", json={"abort_all": True})).status_code == 200
            return [(await task).json() for task in tasks]

    for out in asyncio.run(scenario()):
        assert out["meta_info"]["finish_reason"]["type"] == "abort"
        assert 0 < len(out["output_ids"]) < 3500


def test_a_disconnected_client_s_request_is_aborted(engine_url):
    body = {"input_ids": [10, 11], "sampling_params": {"max_new_tokens": 3500, "ignore_eos": True}}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{engine_url}/generate", json=body, timeout=0.5)
    deadline = time.monotonic() + 10
    while server_info(engine_url)["running_requests"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server_info(engine_url)["running_requests"] == 0


def test_pause_holds_running_and_new_requests_until_continue(engine_url):
    async def scenario():
        async with httpx.AsyncClient(timeout=60) as client:
            body = {
                "input_ids": [20, 21],
                "rid": "paused-long",
                "sampling_params": {"max_new_tokens": 3500, "ignore_eos": True},
            }
            long_task = asyncio.create_task(client.post(f"{engine_url}/generate", json=body))
            await _until(client, engine_url, lambda info: info["running_requests"] == 1)
            assert (await client.post(f"{engine_url}/pause_generation", json={"mode": "retract"})).status_code == 200
            short_body = {"input_ids": [22], "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}}
            short_task = asyncio.create_task(client.post(f"{engine_url}/generate", json=short_body))
            before = (await client.get(f"{engine_url}/server_info")).json()
            await asyncio.sleep(0.3)
            after = (await client.get(f"{engine_url}/server_info")).json()
            short_waited = not short_task.done()
            await client.post(f"{engine_url}/continue_generation")
            short = (await short_task).json()
            await client.post(f"{engine_url}/abort_request", json={"rid": "paused-long"})
            await long_task
            return before, after, short_waited, short

    before, after, short_waited, short = asyncio.run(scenario())
    assert after["paused"] and short_waited
    assert after["generated_tokens"] == before["generated_tokens"]  # nothing decoded while paused
    assert after["running_requests"] == 1 and after["waiting_requests"] == 1
    assert short["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert not server_info(engine_url)["paused"]


def test_n_samples_of_one_prompt_in_one_request_are_the_requests_for_one_with_derived_seeds(engine_url, tokenizer):
    """``sampling_params.n`` (SGLang's parallel sampling): one request answers a list of n
    samples; copy i is exactly what a request for one sample with seed
    ``parallel_sample_seed(seed, i)`` gets (tokens and log-probs), and a rid names the copies."""
    from slime_core.engine import parallel_sample_seed

    prompt, params = tokenizer.encode("What is 2+2?"), {"temperature": 1.0, "max_new_tokens": 10, "ignore_eos": True}
    body = {
        "input_ids": prompt,
        "return_logprob": True,
        "rid": "group-7",
        "sampling_params": {**params, "n": 5, "sampling_seed": 42},
    }
    response = httpx.post(f"{engine_url}/generate", json=body, timeout=60)
    assert response.status_code == 200, response.text
    copies = response.json()
    assert isinstance(copies, list) and len(copies) == 5
    assert [c["meta_info"]["id"] for c in copies] == [f"group-7-{i}" for i in range(5)]
    assert len({tuple(c["output_ids"]) for c in copies}) > 1  # the copies have their own seeds
    for i, copy in enumerate(copies):
        alone = generate(engine_url, prompt, return_logprob=True, sampling_seed=parallel_sample_seed(42, i), **params)
        assert copy["output_ids"] == alone["output_ids"]
        logprobs = [[lp for lp, _, _ in answer["meta_info"]["output_token_logprobs"]] for answer in (copy, alone)]
        torch.testing.assert_close(torch.tensor(logprobs[0]), torch.tensor(logprobs[1]), atol=1e-4, rtol=0)
    assert isinstance(generate(engine_url, prompt, n=1, **params), dict)  # n = 1: one answer, as SGLang


def test_a_seed_makes_sampling_reproducible(engine_url):
    params = {"temperature": 1.0, "max_new_tokens": 30, "ignore_eos": True}
    first = generate(engine_url, [5, 6, 7], sampling_seed=11, **params)
    assert generate(engine_url, [5, 6, 7], sampling_seed=11, **params)["output_ids"] == first["output_ids"]
    assert generate(engine_url, [5, 6, 7], sampling_seed=12, **params)["output_ids"] != first["output_ids"]
    assert first["meta_info"]["finish_reason"] == {"type": "length", "length": 30}


def test_stop_token_ids_and_stop_strings_end_the_output(engine_url, tokenizer):
    params = {"temperature": 1.0, "max_new_tokens": 40, "ignore_eos": True, "sampling_seed": 5}
    full = generate(engine_url, [5, 6, 7], **params)["output_ids"]

    stop_token = full[6]
    end = full.index(stop_token) + 1
    out = generate(engine_url, [5, 6, 7], stop_token_ids=[stop_token], **params)
    assert out["output_ids"] == full[:end]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_token}
    assert out["text"] == tokenizer.decode(full[: end - 1])  # the stop token is not in the text

    stop = tokenizer.decode(full[10:12])
    out = generate(engine_url, [5, 6, 7], stop=[stop], **params)
    text = tokenizer.decode(full)
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert out["text"] == text[: text.index(stop)]
    assert out["output_ids"] == full[: len(out["output_ids"])] and stop in tokenizer.decode(out["output_ids"])


def test_the_prompt_and_output_fit_the_context_length(engine_url):
    out = generate(engine_url, [5] * 4090, max_new_tokens=100, ignore_eos=True)
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 6}
    assert generate(engine_url, [5, 6], max_new_tokens=0)["output_ids"] == []


async def _until(client: httpx.AsyncClient, url: str, condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition((await client.get(f"{url}/server_info")).json()):
        assert time.monotonic() < deadline, "the engine never reached the expected state"
        await asyncio.sleep(0.01)
