"""The CPU engine takes every ``/generate`` body SGLang's ``GenerateReqInput`` takes: prompts as
text (tokenised as SGLang does) or ids, batches with per-prompt fields, prompt log-probs
(``logprob_start_len``, what slime's on-policy-distillation reward reads), streaming; and it
refuses only what it cannot do, naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import torch

from slime_sglang.cpu_engine.generate_body import GENERATE_REQ_FIELDS

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_torch_thread")]
SCHEMA = json.loads((Path(__file__).parent / "data" / "sglang_requests.json").read_text())
GREEDY = {"temperature": 0, "max_new_tokens": 6}


def post(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/generate", json=body, timeout=60)


def test_the_engine_knows_every_field_of_the_pinned_sglang_request_class():
    assert set(GENERATE_REQ_FIELDS) == set(SCHEMA["classes"]["GenerateReqInput"])


def test_a_text_prompt_is_tokenised_as_sglang_does_and_answered_as_its_ids(engine_url, tokenizer):
    text = "The quick brown fox"
    by_text = post(engine_url, {"text": text, "sampling_params": GREEDY, "return_logprob": True}).json()
    by_ids = post(engine_url, {"input_ids": tokenizer.encode(text), "sampling_params": GREEDY}).json()
    assert by_text["output_ids"] == by_ids["output_ids"] and by_text["text"] == by_ids["text"]
    assert by_text["meta_info"]["prompt_tokens"] == len(tokenizer.encode(text))
    assert len(by_text["meta_info"]["output_token_logprobs"]) == len(by_text["output_ids"])


def test_a_batch_answers_a_list_with_per_prompt_fields(engine_url, tokenizer):
    texts = ["The quick brown fox", "1 + 1 ="]
    body = {
        "text": texts,
        "sampling_params": [GREEDY, {**GREEDY, "max_new_tokens": 2}],
        "rid": ["a", "b"],
        "return_logprob": [True, False],
    }
    answers = post(engine_url, body).json()
    assert [a["meta_info"]["id"] for a in answers] == ["a", "b"]
    assert len(answers[1]["output_ids"]) == 2 and "output_token_logprobs" not in answers[1]["meta_info"]
    ids_batch = post(engine_url, {"input_ids": [tokenizer.encode(t) for t in texts], "sampling_params": GREEDY})
    alone = [post(engine_url, {"text": t, "sampling_params": GREEDY}).json()["output_ids"] for t in texts]
    assert [a["output_ids"] for a in ids_batch.json()] == alone
    n_batch = post(engine_url, {"text": texts, "sampling_params": {**GREEDY, "n": 2}}).json()
    assert [a["output_ids"] for a in n_batch] == [alone[0], alone[0], alone[1], alone[1]]


def test_prompt_log_probs_from_logprob_start_len_match_transformers(engine_url, tokenizer, reference_model):
    """slime's OPD reward: max_new_tokens 0, return_logprob, logprob_start_len 0 -> input_token_logprobs."""
    ids = tokenizer.encode("The quick brown fox jumps")
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True, "logprob_start_len": 0}
    entries = post(engine_url, body).json()["meta_info"]["input_token_logprobs"]
    assert [token for _, token, _ in entries] == ids and entries[0][0] is None
    with torch.no_grad():
        logits = reference_model(torch.tensor([ids])).logits[0, :-1]
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
    torch.testing.assert_close(torch.tensor([lp for lp, _, _ in entries[1:]]), expected, atol=1e-4, rtol=0)
    later = post(engine_url, {**body, "logprob_start_len": 2}).json()["meta_info"]["input_token_logprobs"]
    assert later == entries[2:]


def test_top_logprobs_are_sglang_s_and_match_transformers(engine_url, tokenizer, reference_model):
    """top_logprobs_num k: each output token's k most likely tokens, most likely first, under the
    request's temperature (as its output_token_logprobs), and with logprob_start_len each prompt
    token's (no temperature, null for the first), as [logprob, id, text] entries."""
    ids = tokenizer.encode("The quick brown fox")
    body = {
        "input_ids": ids,
        "sampling_params": {"temperature": 0.7, "max_new_tokens": 3, "sampling_seed": 1},
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": 4,
        "return_text_in_logprobs": True,
    }
    meta = post(engine_url, body).json()["meta_info"]
    output_ids = [token for _, token, _ in meta["output_token_logprobs"]]
    with torch.no_grad():
        logits = reference_model(torch.tensor([ids + output_ids])).logits[0, :-1]
    expected_output = torch.log_softmax(logits[len(ids) - 1 :] / 0.7, -1).topk(4, -1)
    expected_input = torch.log_softmax(logits[: len(ids) - 1], -1).topk(4, -1)
    output_top, input_top = meta["output_top_logprobs"], meta["input_top_logprobs"]
    assert len(output_top) == len(output_ids) and len(input_top) == len(ids) and input_top[0] is None
    for got, (values, top_ids) in ((output_top, expected_output), (input_top[1:], expected_input)):
        assert [[token for _, token, _ in row] for row in got] == top_ids.tolist()
        torch.testing.assert_close(torch.tensor([[lp for lp, _, _ in row] for row in got]), values, atol=1e-4, rtol=0)
        assert all(text == tokenizer.decode([token]) for row in got for _, token, text in row)
    batch = post(
        engine_url,
        {"input_ids": [ids, ids], "sampling_params": GREEDY, "return_logprob": True, "top_logprobs_num": [2, 0]},
    )
    first, second = batch.json()
    assert [len(row) for row in first["meta_info"]["output_top_logprobs"]] == [2] * len(first["output_ids"])
    assert "output_top_logprobs" not in second["meta_info"] and "input_top_logprobs" not in first["meta_info"]


def test_a_streamed_request_ends_with_done(engine_url):
    body = {"text": "The quick brown fox", "sampling_params": GREEDY, "stream": True}
    with httpx.stream("POST", f"{engine_url}/generate", json=body, timeout=60) as response:
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["text"] == post(engine_url, {**body, "stream": False}).json()["text"]


@pytest.mark.parametrize(
    "body, hint",
    [
        ({"text": "hi", "lora_path": "adapter"}, "lora_path: the CPU engine serves no LoRA adapters"),
        ({"text": "hi", "custom_logit_processor": "x"}, "custom_logit_processor: the CPU engine runs no"),
        ({"text": "hi", "top_logprobs_num": -1}, "top_logprobs_num must be >= 0"),
        ({"text": "hi", "return_hidden_states": True}, "return_hidden_states: not supported"),
        ({"text": "hi", "input_ids": [5]}, "as text or as input_ids, not both"),
        ({"text": ["a", "b"], "rid": ["x"]}, "rid has 1 entries for a batch of 2"),
        ({"input_ids": [5, 6], "return_logprob": True, "logprob_start_len": 2}, "logprob_start_len must be"),
    ],
)
def test_what_the_engine_cannot_do_is_refused_naming_the_field(engine_url, body, hint):
    response = post(engine_url, body)
    assert response.status_code == 400 and hint in response.json()["error"]


def test_fields_left_at_sglangs_defaults_are_accepted(engine_url):
    body = {"text": "hi", "sampling_params": GREEDY, "lora_path": None, "image_data": None, "top_logprobs_num": 0}
    body |= {"stream": False, "priority": 3, "custom_labels": {"team": "a"}, "return_hidden_states": False}
    assert post(engine_url, body).status_code == 200
