"""The sessions middleware with the official ``openai`` client: every recorded token is the one
the engine generated or the template added, checked token by token against the engine itself."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from slime_core.sample import SampleStatus
from slime_router.sessions.client import SessionError, asession_sample, session_sample

pytestmark = pytest.mark.integration
EOS = 1  # the tiny tokenizer's <|endoftext|>
SAMPLING = {"temperature": 1.0, "max_tokens": 8}


@pytest.fixture(scope="module")
def client(router):
    return openai.OpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def engine_generate(engines, input_ids: list[int], seed: int) -> dict:
    """What an engine generates for ``input_ids`` with the test's sampling (seeded: reproducible)."""
    body = {
        "input_ids": input_ids,
        "return_logprob": True,
        "sampling_params": {"temperature": 1.0, "max_new_tokens": 8, "sampling_seed": seed},
    }
    answer = httpx.post(f"{engines[0]}/generate", json=body, timeout=60).json()
    return {
        "ids": answer["output_ids"],
        "log_probs": [entry[0] for entry in answer["meta_info"]["output_token_logprobs"]],
    }


def test_a_tool_using_conversation_is_recorded_token_by_token(client, router, engines, tokenizer):
    messages = [{"role": "user", "content": "What is 2+3? Use the calculator."}]
    first = client.chat.completions.create(
        model="tiny", messages=messages, logprobs=True, seed=11, **SAMPLING, extra_headers={"X-Session-Id": "calc-1"}
    )
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "call-1", "content": "5"},
    ]
    second = client.chat.completions.create(
        model="tiny", messages=messages, seed=12, **SAMPLING, extra_body={"session_id": "calc-1"}
    )
    messages += [second.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Sure?"}]
    third = client.chat.completions.create(
        model="tiny", messages=messages, seed=13, **SAMPLING, extra_headers={"X-Session-Id": "calc-1"}
    )
    sample = session_sample(router.url, "calc-1")

    # What the engine generates from the exact prompts: turn 1 from the template, later turns
    # from the recorded tokens plus the template's text for the new messages only.
    prompt = tokenizer.encode(
        tokenizer.apply_chat_template(messages[:1], add_generation_prompt=True, tokenize=False),
        add_special_tokens=False,
    )
    out1 = engine_generate(engines, prompt, 11)
    tool_turn = tokenizer.encode(_turn_end(out1["ids"]) + "<|user|>tool: 5\n<|assistant|>", add_special_tokens=False)
    out2 = engine_generate(engines, prompt + out1["ids"] + tool_turn, 12)
    user_turn = tokenizer.encode(_turn_end(out2["ids"]) + "<|user|>Sure?\n<|assistant|>", add_special_tokens=False)
    out3 = engine_generate(engines, prompt + out1["ids"] + tool_turn + out2["ids"] + user_turn, 13)

    assert sample.tokens == prompt + out1["ids"] + tool_turn + out2["ids"] + user_turn + out3["ids"]
    assert sample.prompt_length == len(prompt) and sample.prompt == messages[:1]
    assert sample.loss_mask == _ones(out1) + [0] * len(tool_turn) + _ones(out2) + [0] * len(user_turn) + _ones(out3)
    expected_log_probs = (
        out1["log_probs"] + [0.0] * len(tool_turn) + out2["log_probs"] + [0.0] * len(user_turn) + out3["log_probs"]
    )
    assert sample.rollout_log_probs == pytest.approx(expected_log_probs, abs=1e-5)
    status = SampleStatus.COMPLETED if out3["ids"][-1] == EOS else SampleStatus.TRUNCATED
    assert sample.status == status and sample.weight_versions == [0]
    assert (
        sample.metadata["session_id"] == "calc-1"
        and sample.metadata["messages"][-1]["content"] == third.choices[0].message.content
    )
    # the answers are what the engine generated, too
    assert first.choices[0].message.content == tokenizer.decode(out1["ids"], skip_special_tokens=True)
    assert [entry.logprob for entry in first.choices[0].logprobs.content] == pytest.approx(out1["log_probs"], abs=1e-5)
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == (len(prompt), len(out1["ids"]))
    assert second.usage.prompt_tokens == len(prompt) + len(out1["ids"]) + len(tool_turn)
    with pytest.raises(SessionError, match="no session 'calc-1'"):  # fetched with forget=True
        session_sample(router.url, "calc-1")


def _ones(output: dict) -> list[int]:
    return [1] * len(output["ids"])


def _turn_end(output_ids: list[int]) -> str:
    """The tiny template closes an assistant turn with <|endoftext|> and a newline."""
    return "\n" if output_ids[-1] == EOS else "<|endoftext|>\n"


def test_a_session_stays_on_one_engine(client, router, engines, served):
    before = served(engines)
    messages = [{"role": "user", "content": "Hi"}]
    for turn in range(3):
        reply = client.chat.completions.create(
            model="tiny", messages=messages, extra_headers={"X-Session-Id": "sticky"}, **SAMPLING
        )
        messages += [
            reply.choices[0].message.model_dump(exclude_none=True),
            {"role": "user", "content": f"again {turn}"},
        ]
    assert sorted(after - first for after, first in zip(served(engines), before)) == [0, 3]
    session_sample(router.url, "sticky")


def test_completions_extend_the_recorded_text(router, tokenizer):
    async def agent():  # an async agent, fetching its session the async way
        async with openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0) as client:
            first = await client.completions.create(
                model="tiny", prompt="Q: 1+1=", extra_headers={"X-Session-Id": "text"}, **SAMPLING
            )
            prompt = "Q: 1+1=" + first.choices[0].text + "\nObservation: ok\nQ:"
            second = await client.completions.create(
                model="tiny", prompt=prompt, extra_headers={"X-Session-Id": "text"}, **SAMPLING
            )
        return first, second, await asession_sample(router.url, "text")

    first, second, sample = asyncio.run(agent())
    added = tokenizer.encode("\nObservation: ok\nQ:", add_special_tokens=False)
    n1, n2 = first.usage.completion_tokens, second.usage.completion_tokens
    assert sample.prompt == "Q: 1+1=" and sample.prompt_length == len(
        tokenizer.encode("Q: 1+1=", add_special_tokens=False)
    )
    assert sample.loss_mask == [1] * n1 + [0] * len(added) + [1] * n2
    assert sample.tokens[sample.prompt_length + n1 : len(sample.tokens) - n2] == added
    assert second.usage.prompt_tokens == sample.prompt_length + n1 + len(added)


def test_a_changed_history_is_a_conflict(client, router):
    messages = [{"role": "user", "content": "Hi"}]
    reply = client.chat.completions.create(
        model="tiny", messages=messages, extra_headers={"X-Session-Id": "edit"}, **SAMPLING
    )
    edited = [
        {"role": "user", "content": "Hello"},
        reply.choices[0].message.model_dump(exclude_none=True),
        {"role": "user", "content": "And?"},
    ]
    with pytest.raises(openai.ConflictError, match=r"messages\[0\] \(user\) differs from what the session recorded"):
        client.chat.completions.create(
            model="tiny", messages=edited, extra_headers={"X-Session-Id": "edit"}, **SAMPLING
        )
    assert session_sample(router.url, "edit").response_length == reply.usage.completion_tokens  # unchanged


def test_a_streamed_answer_carries_the_same_completion(client, router):
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Hi"}],
            stream=True,
            stream_options={"include_usage": True},
            seed=5,
            **SAMPLING,
            extra_headers={"X-Session-Id": "stream"},
        )
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    sample = session_sample(router.url, "stream")
    assert chunks[-1].usage.completion_tokens == sample.response_length and chunks[-2].choices[0].finish_reason
    assert text == sample.response


def test_requests_without_a_session_are_answered_not_recorded(client, router):
    reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}], **SAMPLING)
    assert reply.usage.completion_tokens > 0 and reply.choices[0].finish_reason in ("stop", "length")
    assert httpx.get(f"{router.url}/v1/models", timeout=10).json()["data"][0]["object"] == "model"


def test_the_shipped_agent_example_turns_its_episodes_into_samples(router):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "examples" / "agent_sessions" / "agent.py"
    spec = importlib.util.spec_from_file_location("agent_sessions_example", path)
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    sample = agent.collect(router.url, "What is 2 + 3?", 5, max_tokens=8, seed=1)
    replies = [message for message in sample.metadata["messages"] if message["role"] == "assistant"]
    model_runs = sum(1 for i, bit in enumerate(sample.loss_mask) if bit and (i == 0 or not sample.loss_mask[i - 1]))
    assert sample.reward in (0.0, 1.0) and sample.label == "5"
    assert 1 <= len(replies) == model_runs <= 3  # one trainable run of tokens per model turn, the rest mask 0
    assert sample.metadata["messages"][0]["content"] == agent.SYSTEM
