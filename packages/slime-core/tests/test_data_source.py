from types import SimpleNamespace

import pytest

from slime_core.data.prompt_dataset import PromptDataset, PromptFormat
from slime_core.data.records import DataError
from slime_core.data.slicing import split_path_slice
from slime_core.data.source import DataSource, PromptDataSource

RECORDS = [{"prompt": f"{i}+1=", "label": str(i + 1), "metadata": {"i": i}} for i in range(10)]


def source_of(path, n=2, **kwargs):
    return PromptDataSource(PromptDataset(str(path), PromptFormat()), n_samples_per_prompt=n, **kwargs)


def prompts(groups):
    return [group[0].prompt for group in groups]


def test_slice_syntax():
    assert split_path_slice("d.jsonl@[2:5]") == ("d.jsonl", slice(2, 5))
    assert split_path_slice("d.jsonl@[:5]") == ("d.jsonl", slice(None, 5))
    assert split_path_slice("d.jsonl") == ("d.jsonl", slice(None))
    with pytest.raises(ValueError, match="path@\\[start:end\\]"):
        split_path_slice("d.jsonl@[a:b]")


def test_reads_jsonl_with_keys_and_slice(write_jsonl):
    path = write_jsonl(RECORDS)
    dataset = PromptDataset(f"{path}@[2:5]", PromptFormat())
    assert [s.prompt for s in dataset.samples] == ["2+1=", "3+1=", "4+1="]
    assert dataset.samples[0].label == "3"
    assert dataset.samples[0].metadata["i"] == 2
    assert dataset.samples[0].metadata["source"] == f"{path}:3"


def test_custom_keys(write_jsonl):
    path = write_jsonl([{"question": "q?", "answer": "a", "extra": {"k": 1}}])
    fmt = PromptFormat(input_key="question", label_key="answer", metadata_key="extra")
    sample = PromptDataset(str(path), fmt).samples[0]
    assert (sample.prompt, sample.label, sample.metadata["k"]) == ("q?", "a", 1)


def test_reads_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "data.parquet"
    pq.write_table(pa.Table.from_pylist(RECORDS[:4]), path)
    dataset = PromptDataset(str(path), PromptFormat())
    assert [s.label for s in dataset.samples] == ["1", "2", "3", "4"]
    assert dataset.samples[3].metadata["source"] == f"{path} row 3"


def test_malformed_jsonl_line_names_file_and_line(write_jsonl):
    path = write_jsonl([RECORDS[0], RECORDS[1], '{"prompt": "3+1=", "label": ', RECORDS[3]])
    with pytest.raises(DataError, match=rf"{path}:3: invalid JSON"):
        PromptDataset(str(path), PromptFormat())


def test_missing_input_key_names_line_and_keys(write_jsonl):
    path = write_jsonl([RECORDS[0], {"question": "x", "label": "1"}])
    with pytest.raises(DataError, match=rf"{path}:2: no 'prompt' key \(keys: question, label\); set --input-key"):
        PromptDataset(str(path), PromptFormat())


def test_chat_template_and_tokens(write_jsonl, tokenizer):
    path = write_jsonl(
        [{"prompt": "1+2=", "label": "3"}, {"prompt": [{"role": "user", "content": "hi"}], "label": "x"}]
    )
    dataset = PromptDataset(str(path), PromptFormat(apply_chat_template=True), tokenizer)
    first, second = dataset.samples
    assert first.prompt == "<|user|>1+2=\n<|assistant|>"
    assert second.prompt == "<|user|>hi\n<|assistant|>"
    assert first.tokens == tokenizer.encode(first.prompt, add_special_tokens=False)
    assert tokenizer.decode(first.tokens) == first.prompt


def test_over_long_prompts_are_dropped_and_counted(write_jsonl, tokenizer, caplog):
    path = write_jsonl([{"prompt": "x" * n, "label": ""} for n in (3, 8, 5, 9)])
    dataset = PromptDataset(str(path), PromptFormat(max_prompt_len=5), tokenizer)
    assert [len(s.prompt) for s in dataset.samples] == [3, 5]
    assert dataset.dropped_too_long == 2
    assert "dropped 2 of 4 prompts longer than 5 tokens" in caplog.text


def test_groups_hold_independent_copies(write_jsonl):
    source = source_of(write_jsonl(RECORDS), n=3, shuffle=False)
    assert isinstance(source, DataSource)
    groups = source.get_samples(2)
    assert [[(s.group_index, s.index) for s in g] for g in groups] == [
        [(0, 0), (0, 1), (0, 2)],
        [(1, 0), (1, 1), (1, 2)],
    ]
    groups[0][0].metadata["i"] = 99
    groups[0][0].tokens.append(1)
    assert groups[0][1].metadata["i"] == 0 and groups[0][1].tokens == []
    assert source.dataset.samples[0].metadata["i"] == 0


def test_epochs_reshuffle_deterministically(write_jsonl):
    path = write_jsonl(RECORDS)
    first = prompts(source_of(path, seed=7).get_samples(20))
    second = prompts(source_of(path, seed=7).get_samples(20))
    assert first == second
    epoch0, epoch1 = first[:10], first[10:]
    assert sorted(epoch0) == sorted(epoch1) == sorted(r["prompt"] for r in RECORDS)
    assert epoch0 != epoch1
    assert prompts(source_of(path, seed=8).get_samples(10)) != epoch0


def test_partial_groups_come_back_first(write_jsonl):
    source = source_of(write_jsonl(RECORDS), shuffle=False)
    groups = source.get_samples(3)
    groups[1][0].append_response([1, 2], log_probs=[-1.0, -1.0])
    source.add_samples([groups[1]])
    again = source.get_samples(2)
    assert again[0] is groups[1] and again[0][0].response_length == 2
    assert again[1][0].prompt == "3+1="
    assert len(source.buffer) == 0


def test_buffer_filter_chooses_which_partial_groups_go_first(write_jsonl):
    newest_first = lambda groups, n: list(reversed(groups))[:n]  # noqa: E731
    source = source_of(write_jsonl(RECORDS), shuffle=False, buffer_filter=newest_first)
    a, b, c = source.get_samples(3)
    source.add_samples([a, b, c])
    assert source.get_samples(2) == [c, b]
    assert source.get_samples(1) == [a]


def test_save_and_load_continue_the_same_order(write_jsonl, tmp_path):
    path = write_jsonl(RECORDS)
    uninterrupted = source_of(path, seed=3)
    first = source_of(path, seed=3)
    assert prompts(first.get_samples(7)) == prompts(uninterrupted.get_samples(7))
    partial = first.get_samples(1)
    partial[0][0].append_response([4], log_probs=[-0.5])
    first.add_samples(partial)
    uninterrupted.get_samples(1)
    first.save(tmp_path / "data_state.json")

    resumed = source_of(path, seed=3)
    resumed.load(tmp_path / "data_state.json")
    back = resumed.get_samples(1)[0]
    assert back[0].rollout_log_probs == [-0.5] and back[0].group_index == partial[0][0].group_index
    assert prompts(resumed.get_samples(8)) == prompts(uninterrupted.get_samples(8))


def test_load_refuses_a_different_dataset(write_jsonl, tmp_path):
    state = source_of(write_jsonl(RECORDS, "a.jsonl")).state_dict()
    other = source_of(write_jsonl(RECORDS[:5], "b.jsonl"))
    with pytest.raises(ValueError, match="made with 10 prompts and seed 42, this run has 5 prompts"):
        other.load_state_dict(state)


def test_from_config_uses_slime_option_names(write_jsonl):
    path = write_jsonl([{"q": "a", "a": "1"}, {"q": "b", "a": "2"}])
    config = SimpleNamespace(
        prompt_data=str(path),
        input_key="q",
        label_key="a",
        metadata_key="",
        tool_key="",
        apply_chat_template=False,
        rollout_max_prompt_len=None,
        n_samples_per_prompt=4,
        rollout_shuffle=False,
        rollout_seed=0,
    )
    groups = PromptDataSource.from_config(config).get_samples(2)
    assert [len(g) for g in groups] == [4, 4] and groups[1][3].label == "2"
