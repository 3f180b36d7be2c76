"""The slime modules slime-compat adds, slime's default loss mask and slime's global
``Sample.index``: through the real loop (fake backends, in this process) where the loop
matters, directly where it does not."""

import asyncio
import json
from types import SimpleNamespace

import pytest

P = "slime_style_modules."


@pytest.fixture
def seen():
    from slime_style_modules import SEEN

    SEEN.clear()
    return SEEN


# ------------------------------------------------------------------ loss mask and Sample.index


def test_a_generate_function_without_loss_mask_trains_the_whole_response_and_sees_global_indices(fake_loop, seen):
    _, batch = fake_loop(
        "--custom-generate-function-path",
        P + "bare_generate",
        "--custom-rm-path",
        "slime_style_plugins.digit_reward",
        "--no-rollout-shuffle",
    )
    assert batch.loss_masks == [[1, 1]] * 4  # left empty, or None: all ones over the response, as slime
    # slime's index: unique over the run (two rollouts of 2 x 2), group_index per prompt
    assert sorted(seen["generate"]) == [(g, 2 * g + i) for g in range(4) for i in range(2)]
    assert batch.rewards == [1.0, 0.0, 1.0, 0.0]  # "7" for even indices, "x" for odd ones


def test_the_native_source_counts_global_indices_and_resumes_the_count(tmp_path):
    from slime_core.data.prompt_dataset import PromptDataset, PromptFormat
    from slime_core.data.source import PromptDataSource

    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"q{i}", "label": "a"}) + "\n" for i in range(3)))
    source = PromptDataSource(PromptDataset(str(data), PromptFormat()), n_samples_per_prompt=2, shuffle=False)
    first = source.get_samples(2)
    assert [(s.group_index, s.index, s.global_index) for g in first for s in g] == [
        (0, 0, 0),
        (0, 1, 1),
        (1, 0, 2),
        (1, 1, 3),
    ]
    state = source.state_dict()
    resumed = PromptDataSource(PromptDataset(str(data), PromptFormat()), n_samples_per_prompt=2, shuffle=False)
    resumed.load_state_dict(state)
    assert [s.global_index for s in resumed.get_samples(1)[0]] == [4, 5]
    del state["next_global_index"]  # a checkpoint from before the counter: counted from the groups
    resumed.load_state_dict(state)
    assert [s.global_index for s in resumed.get_samples(1)[0]] == [4, 5]


def test_slime_sample_index_is_the_global_one_and_to_dict_keeps_both():
    from slime.utils.types import Sample
    from slime_compat.sample import promote
    from slime_core.sample import Sample as CoreSample

    core = CoreSample(group_index=3, index=1, global_index=7)
    sample = promote(core)
    assert (sample.index, sample.global_index) == (7, 7)
    data = sample.to_dict()
    assert (data["index"], data["global_index"]) == (1, 7)  # the core's position stays under "index"
    assert CoreSample.from_dict(data).index == 1
    assert Sample(index=5).index == 5 and Sample(index=5, global_index=9).index == 9
    sample.index = 11  # slime code setting it: both meanings
    assert (sample.index, sample.global_index, sample.to_dict()["index"]) == (11, 11, 11)


# ------------------------------------------------------------------ slime.rollout.sglang_rollout


def test_a_rollout_function_wraps_slime_default_rollout_and_evaluation(fake_loop, tmp_path, seen):
    eval_data = tmp_path / "eval.jsonl"
    eval_data.write_text("".join(f'{{"prompt": "{i}*1=", "label": "{i}"}}\n' for i in range(3)))
    records, batch = fake_loop(
        "--rollout-function-path",
        P + "wrapped_rollout",
        "--eval-function-path",
        P + "wrapped_rollout",
        "--eval-prompt-data",
        "toy",
        str(eval_data),
        "--eval-interval",
        "2",
        "--custom-generate-function-path",
        P + "bare_generate",
        "--custom-rm-path",
        "slime_style_plugins.digit_reward",
        "--no-rollout-shuffle",
    )
    assert seen["rollout"] == [(0, "RolloutFnTrainOutput"), (1, "RolloutFnTrainOutput")]
    assert batch.rewards == [11.0, 10.0, 11.0, 10.0]  # our default rollout's rewards, then the wrapper's +10
    assert batch.group_ids == [2, 2, 3, 3]  # the second rollout's prompts, pulled by our default rollout
    # evaluation: each eval prompt once, slime's running index 0, 1, 2 -> "7", "x", "7"
    assert seen["eval"][0] == ({"toy": [1.0, 0.0, 1.0]},)
    evaluated = [r for r in records if "eval/toy" in r]
    assert evaluated and evaluated[0]["eval/toy"] == pytest.approx(2 / 3)
    assert all(r["rollout/wrapped"] == 1.0 for r in records if r["rollout_id"] >= 0 and "rollout/wrapped" in r)


def test_slime_default_rollout_outside_a_rollout_says_where_it_runs():
    from slime.rollout.sglang_rollout import generate_rollout

    with pytest.raises(RuntimeError, match="--rollout-function-path or --eval-function-path"):
        generate_rollout(SimpleNamespace(), 0, None)


def test_an_async_rollout_function_must_call_it_in_a_thread():
    from slime_compat.default_rollout import RolloutCall

    async def on_the_rollout_loop():
        call = RolloutCall(None, None, asyncio.get_running_loop())
        call.run(asyncio.sleep(0), "generate_rollout")

    with pytest.raises(RuntimeError, match=r"asyncio.to_thread\(generate_rollout"):
        asyncio.run(on_the_rollout_loop())


# ------------------------------------------------------------------ slime.rollout.data_source


def _args(make_config, tiny_model_dir, *flags):
    from slime_compat.args import slime_args

    config, _ = make_config("--hf-checkpoint", str(tiny_model_dir), "--no-rollout-shuffle", *flags)
    return slime_args(config)


def test_slime_data_sources_serve_our_prompt_groups_with_global_indices(make_config, tiny_model_dir, tmp_path):
    from slime.rollout.data_source import RolloutDataSource, RolloutDataSourceWithBuffer, pop_first
    from slime.utils.types import Sample

    args = _args(make_config, tiny_model_dir)
    source = RolloutDataSource(args)
    groups = source.get_samples(2)
    assert [(s.prompt, s.group_index, s.index) for g in groups for s in g] == [
        ("0+1=", 0, 0),
        ("0+1=", 0, 1),
        ("1+1=", 1, 2),
        ("1+1=", 1, 3),
    ]
    assert isinstance(groups[0][0], Sample) and len(source) == 8
    with pytest.raises(RuntimeError, match="read-only"):
        source.add_samples(groups)

    buffered = RolloutDataSourceWithBuffer(args)
    first = buffered.get_samples(2)
    buffered.add_samples(first)
    assert buffered.get_buffer_length() == 2 and buffered.buffer_filter is pop_first
    again = buffered.get_samples(3)  # the buffer first, oldest first, then a fresh prompt
    assert [g[0].prompt for g in again] == ["0+1=", "1+1=", "2+1="] and again[0] is first[0]

    buffer = [["a"], ["b"], ["c"]]
    assert pop_first(args, None, buffer, 2) == [["a"], ["b"]] and buffer == [["c"]]


def test_slime_data_source_buffer_filter_path_and_save_load(make_config, tiny_model_dir, tmp_path):
    from slime.rollout.data_source import RolloutDataSourceWithBuffer

    args = _args(make_config, tiny_model_dir, "--buffer-filter-path", "slime_style_plugins.newest_first")
    args.save = args.load = str(tmp_path / "ckpt")
    source = RolloutDataSourceWithBuffer(args)
    source.add_samples(source.get_samples(2))
    assert [g[0].prompt for g in source.get_samples(1)] == ["1+1="]  # the user's filter: newest first
    source.save(4)
    assert (tmp_path / "ckpt" / "rollout" / "global_dataset_state_dict_4.json").is_file()
    expected = [g[0].prompt for g in source.get_samples(3)]

    restored = RolloutDataSourceWithBuffer(args)
    restored.load(4)
    assert [g[0].prompt for g in restored.get_samples(3)] == expected == ["0+1=", "2+1=", "3+1="]
    restored.load(5)  # no such state: slime logs it and keeps going
    args.load = None
    restored.load(4)  # no --load: nothing to restore


# ------------------------------------------------------------------ slime.utils.mask_utils and sft_rollout


def _segments(tokenizer, *parts):
    """Token ids and loss mask of hand-written ``(text, trained)`` pieces."""
    ids, mask = [], []
    for text, trained in parts:
        piece = tokenizer.encode(text, add_special_tokens=False)
        ids += piece
        mask += [int(trained)] * len(piece)
    return ids, mask


def test_multi_turn_loss_mask_trains_assistant_turns_after_their_header():
    from slime.utils.mask_utils import MultiTurnLossMaskGenerator
    from slime_core.tools.tiny_models import ASSISTANT, EOS, USER, build_char_tokenizer

    tokenizer = build_char_tokenizer()
    generator = MultiTurnLossMaskGenerator(tokenizer, tokenizer_type="qwen3")
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "2"},
        {"role": "tool", "content": "ok"},
        {"role": "assistant", "content": "yes"},
    ]
    expected = _segments(
        tokenizer,
        (USER + "system: be brief\n", 0),
        (USER + "1+1?\n", 0),
        (ASSISTANT, 0),
        ("2" + EOS + "\n", 1),
        (USER + "tool: ok\n", 0),
        (ASSISTANT, 0),
        ("yes" + EOS + "\n", 1),
    )
    token_ids, loss_mask = generator.get_loss_mask(messages)
    assert (token_ids, loss_mask) == expected
    assert generator.get_text_from_loss_mask(token_ids, loss_mask) == ["2" + EOS + "\n", "yes" + EOS + "\n"]
    assert generator.get_response_lengths([loss_mask, [0, 0]]) == [len(loss_mask) - loss_mask.index(1), 0]

    messages[2]["step_loss_mask"] = 0
    assert (
        generator.get_loss_mask(messages)[1]
        == _segments(
            tokenizer,
            (
                USER
                + "system: be brief\n"
                + USER
                + "1+1?\n"
                + ASSISTANT
                + "2"
                + EOS
                + "\n"
                + USER
                + "tool: ok\n"
                + ASSISTANT,
                0,
            ),
            ("yes" + EOS + "\n", 1),
        )[1]
    )


def test_multi_turn_loss_mask_refuses_a_template_that_rewrites_earlier_turns():
    from slime.utils.mask_utils import MultiTurnLossMaskGenerator
    from slime_core.tools.tiny_models import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}{% if loop.last %}[{{ m.content }}]{% else %}{{ m.content }}{% endif %}{% endfor %}"
    )
    with pytest.raises(ValueError, match="message 1: the chat template renders this turn differently"):
        MultiTurnLossMaskGenerator(tokenizer).get_loss_mask(
            [
                {"role": "user", "content": "c"},
                {"role": "assistant", "content": "a"},
                {"role": "assistant", "content": "b"},
            ]
        )
    with pytest.raises(ValueError, match="unsupported tokenizer_type 'llama'"):
        MultiTurnLossMaskGenerator(tokenizer, "llama")


def test_slime_sft_rollout_builds_tokens_and_mask_from_the_chat_template(tiny_model_dir):
    from slime.rollout.sft_rollout import generate_rollout
    from slime.utils.types import Sample
    from slime_core.tools.tiny_models import ASSISTANT, EOS, USER, build_char_tokenizer

    class Conversations:  # a slime data buffer of one conversation per group
        def get_samples(self, num_samples):
            return [
                [
                    Sample(
                        prompt=[
                            {"role": "user", "content": "1+1?"},
                            {"role": "assistant", "content": "2"},
                            {"role": "user", "content": "2+2?"},
                            {"role": "assistant", "content": "4"},
                        ]
                    )
                ]
                for _ in range(num_samples)
            ]

    args = SimpleNamespace(hf_checkpoint=str(tiny_model_dir), rollout_batch_size=2, loss_mask_type="qwen")
    groups = generate_rollout(args, 0, Conversations())
    tokens, mask = _segments(
        build_char_tokenizer(),
        (USER + "1+1?\n" + ASSISTANT, 0),
        ("2" + EOS + "\n", 1),
        (USER + "2+2?\n" + ASSISTANT, 0),
        ("4" + EOS + "\n", 1),
    )
    sample = groups[1][0]
    assert len(groups) == 2 and sample.tokens == tokens
    assert sample.response_length == len(mask) - mask.index(1) == 3 + 7 + 3  # from the first trained token
    assert sample.loss_mask == mask[mask.index(1) :] and sample.rollout_log_probs == [0.0] * sample.response_length
    assert sample.status is Sample.Status.COMPLETED and sample.reward == 0.0


# ------------------------------------------------------------------ the rest of the namespace


def test_native_features_import_and_say_the_native_way():
    from slime.rollout import fully_async_rollout

    with pytest.raises(RuntimeError, match="--train-mode async"):
        fully_async_rollout.generate_rollout_fully_async(None, 0, None)


def test_async_utils_runs_coroutines_from_sync_code_on_one_loop():
    from slime.utils.async_utils import get_async_loop, run

    async def loop_id():
        return id(asyncio.get_running_loop())

    assert run(loop_id()) == run(loop_id()) == id(get_async_loop().loop)


def test_slime_sft_rollout_named_by_flag_trains_chat_messages_without_starting_an_engine(fake_loop, tmp_path):
    """slime's SFT launch: messages in, the multi-turn loss mask trained, no engine nor router."""
    from slime_core.testing import Recorder

    data = tmp_path / "chats.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {"messages": [{"role": "user", "content": f"{i}+1?"}, {"role": "assistant", "content": str(i + 1)}]}
            )
            + "\n"
            for i in range(4)
        )
    )
    _, batch = fake_loop(
        "--prompt-data",
        str(data),
        "--input-key",
        "messages",
        "--loss-type",
        "sft_loss",
        "--rollout-function-path",
        "slime.rollout.sft_rollout.generate_rollout",
        "--n-samples-per-prompt",
        "1",
        "--no-rollout-shuffle",
    )
    assert Recorder.engines == {} and Recorder.routers == {}
    assert len(batch) == 2 and all(mask == [1, 1, 1] for mask in batch.loss_masks)  # "4" + end of turn + newline
