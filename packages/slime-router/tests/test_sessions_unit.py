"""The pieces of the sessions middleware that need no engine: templates turn by turn, requests,
tool calls, trajectories."""

from __future__ import annotations

import pytest

from slime_core.engine import GenerateResult
from slime_router.handlers import HTTPError
from slime_router.sessions import openai_api
from slime_router.sessions.chat_template import ChatTemplate, TemplateError
from slime_router.sessions.tool_calls import assistant_message
from slime_router.sessions.trajectory import Trajectory

EOS = 1


@pytest.fixture(scope="module")
def template(tiny_model_dir):
    return ChatTemplate.load(tiny_model_dir)


def test_end_of_turn_ids_come_from_the_tokenizer_and_generation_config(template):
    assert template.eos_token_ids == {EOS} and template.end_markers == ["<|endoftext|>"]


def test_a_continuation_adds_only_the_turn_end_and_the_new_messages(template):
    history = [{"role": "user", "content": "2+3?"}, {"role": "assistant", "content": "call"}]
    tool = [{"role": "tool", "content": "5", "tool_call_id": "c"}]
    # the model stopped on its own end-of-turn token: the template adds only the newline after it
    assert template.continuation(history, tool, EOS, None, {}) == "\n<|user|>tool: 5\n<|assistant|>"
    # it stopped for another reason (length, a stop string): the end-of-turn token is added too
    assert template.continuation(history, tool, 40, None, {}) == "<|endoftext|>\n<|user|>tool: 5\n<|assistant|>"


def test_a_template_that_rewrites_earlier_turns_is_refused(tiny_model_dir):
    template = ChatTemplate.load(tiny_model_dir)
    template.tokenizer.chat_template = "{{ messages | length }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(TemplateError, match="renders the earlier turns differently") as error:
        template.continuation(
            [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
            [{"role": "user", "content": "c"}],
            EOS,
            None,
            {},
        )
    assert error.value.status == 422


def test_a_trajectory_records_context_with_mask_0_and_output_with_mask_1(template):
    trajectory = Trajectory("s")
    messages = [{"role": "user", "content": "hi"}]
    turn = trajectory.chat_turn(messages, template, None, {})
    output = GenerateResult(
        output_ids=[40, 41, EOS], text="EF", finish_reason="stop", log_probs=[-1.0, -2.0, -3.0], weight_version="3"
    )
    reply = {"role": "assistant", "content": "EF"}
    trajectory.record(turn, output, prompt=messages, reply=reply)
    follow_up = messages + [reply, {"role": "user", "content": "ok"}]
    second = trajectory.chat_turn(follow_up, template, None, {})
    assert second.new_text == "\n<|user|>ok\n<|assistant|>"
    assert second.prompt_ids == turn.prompt_ids + [40, 41, EOS] + template.encode(second.new_text)
    trajectory.record(
        second,
        GenerateResult([42], "G", "length", [-4.0], "3"),
        prompt=None,
        reply={"role": "assistant", "content": "G"},
    )
    sample = trajectory.to_sample()
    assert sample.tokens == second.prompt_ids + [42] and sample.prompt_length == len(turn.prompt_ids)
    assert sample.loss_mask == [1, 1, 1] + [0] * len(second.new_ids) + [1]
    assert sample.rollout_log_probs == [-1.0, -2.0, -3.0] + [0.0] * len(second.new_ids) + [-4.0]
    assert sample.weight_versions == [3] and sample.status.value == "truncated"
    with pytest.raises(HTTPError, match=r"messages\[1\] \(assistant\) differs") as error:
        trajectory.chat_turn(
            messages + [{"role": "assistant", "content": "XX"}, {"role": "user", "content": "?"}], template, None, {}
        )
    assert error.value.status == 409
    with pytest.raises(HTTPError, match="is a chat session"):
        trajectory.completion_turn("hi", template)


def test_hermes_tool_calls_become_openai_tool_calls():
    text = 'Let me compute.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    message = assistant_message(text, tools=[{"type": "function", "function": {"name": "add"}}])
    assert message["content"] == "Let me compute."
    assert [(call["function"]["name"], call["function"]["arguments"]) for call in message["tool_calls"]] == [
        ("add", '{"a": 2, "b": 3}')
    ]
    assert assistant_message(text, tools=None) == {"role": "assistant", "content": text}  # no tools offered: text only
    broken = "<tool_call>{not json}</tool_call>"
    assert assistant_message(broken, tools=[{}]) == {"role": "assistant", "content": broken}


def test_openai_fields_map_to_sglang_sampling_params():
    asked = openai_api.parse_chat(
        {
            "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
            "max_tokens": 7,
            "seed": 3,
            "temperature": 0.5,
            "top_k": 4,
            "stop": ["x"],
            "stream": True,
            "stream_options": {"include_usage": True},
            "tool_choice": "auto",
        }
    )
    assert asked.sampling == {"max_new_tokens": 7, "sampling_seed": 3, "temperature": 0.5, "top_k": 4, "stop": ["x"]}
    assert asked.messages == [{"role": "user", "content": "ab"}] and asked.stream and asked.include_usage
    with pytest.raises(HTTPError, match="tool_choice 'required' is not supported"):
        openai_api.parse_chat({"messages": [{"role": "user", "content": "a"}], "tool_choice": "required"})
    assert openai_api.parse_completion({"prompt": [[5, 6]]}).prompt == [5, 6]
