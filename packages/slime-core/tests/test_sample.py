import json

import pytest

from slime_core import Sample, SampleStatus


def prompt_sample():
    return Sample(group_index=3, index=1, prompt="1+1=", tokens=[10, 11, 12], label="2")


def test_append_model_tokens_keeps_lengths_consistent():
    sample = prompt_sample()
    sample.append_response([5, 6], log_probs=[-0.1, -0.2], text="ab", weight_version=4)
    assert sample.tokens == [10, 11, 12, 5, 6]
    assert (sample.response_length, sample.prompt_length) == (2, 3)
    assert sample.loss_mask == [1, 1]
    assert sample.rollout_log_probs == [-0.1, -0.2]
    assert sample.response == "ab" and sample.weight_versions == [4]
    sample.check()


def test_tool_tokens_are_masked_out_and_get_zero_logprobs():
    sample = prompt_sample()
    sample.append_response([5], log_probs=[-0.5], text="a", weight_version=1)
    sample.append_response([7, 8, 9], trainable=False, text="<tool>")
    sample.append_response([6], log_probs=[-0.3], text="b", weight_version=2)
    assert sample.loss_mask == [1, 0, 0, 0, 1]
    assert sample.rollout_log_probs == [-0.5, 0.0, 0.0, 0.0, -0.3]
    assert sample.response_length == 5 and sample.response == "a<tool>b"
    assert sample.weight_versions == [1, 2]
    sample.check()


def test_trainable_tokens_need_one_logprob_each():
    sample = prompt_sample()
    with pytest.raises(ValueError, match="2 trainable tokens need as many log-probs, got 1"):
        sample.append_response([5, 6], log_probs=[-0.1])
    with pytest.raises(ValueError, match="got none"):
        sample.append_response([5])
    assert sample.response_length == 0 and sample.tokens == [10, 11, 12]


def test_check_reports_inconsistent_lengths():
    sample = prompt_sample()
    sample.response_length = 2
    with pytest.raises(ValueError, match="loss_mask has 0 entries for 2 response tokens"):
        sample.check()


def test_dict_round_trip_through_json():
    sample = prompt_sample()
    sample.prompt = [{"role": "user", "content": "hi"}]
    sample.append_response([5], log_probs=[-0.1], weight_version=2)
    sample.reward = {"score": 1.0, "acc": True}
    sample.status = SampleStatus.TRUNCATED
    sample.metadata = {"rm_type": "math"}
    data = json.loads(json.dumps(sample.to_dict()))
    assert data["status"] == "truncated"
    restored = Sample.from_dict(data)
    assert restored == sample
    assert restored.status is SampleStatus.TRUNCATED


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(ValueError, match=r"unknown keys \['reward_score'\]"):
        Sample.from_dict({"prompt": "x", "reward_score": 1})


# ---------------------------------------------------------------- top-p nuclei


def test_nuclei_follow_the_tokens_tool_output_gets_empty_ones_and_a_json_round_trip_keeps_them():
    sample = prompt_sample()
    sample.append_response([5, 6], log_probs=[-0.1, -0.2], top_p_token_ids=[5, 9, 6], top_p_token_offsets=[0, 2, 3])
    sample.append_response([7], trainable=False)
    sample.append_response([8], log_probs=[-0.3], top_p_token_ids=[8, 2], top_p_token_offsets=[0, 2])
    assert sample.rollout_top_p_token_ids == [5, 9, 6, 8, 2]
    assert sample.rollout_top_p_token_offsets == [0, 2, 3, 3, 5]
    sample.check()
    assert Sample.from_dict(json.loads(json.dumps(sample.to_dict()))) == sample


def test_the_first_nuclei_start_the_record_with_empty_ones_for_earlier_tokens():
    sample = prompt_sample()
    sample.append_response([7, 7], trainable=False)
    assert sample.rollout_top_p_token_offsets is None
    sample.append_response([5], log_probs=[-0.1], top_p_token_ids=[5], top_p_token_offsets=[0, 1])
    assert (sample.rollout_top_p_token_ids, sample.rollout_top_p_token_offsets) == ([5], [0, 0, 0, 1])


def test_nuclei_that_do_not_fit_the_tokens_are_refused_naming_the_sample():
    sample = prompt_sample()
    with pytest.raises(ValueError, match="sample 3/1: .* 2 offsets for 2 tokens"):
        sample.append_response([5, 6], log_probs=[-0.1, -0.2], top_p_token_ids=[5], top_p_token_offsets=[0, 1])
    with pytest.raises(ValueError, match="offsets run from 0 to 1, not from 0 to the 2 ids"):
        sample.append_response([5], log_probs=[-0.1], top_p_token_ids=[5, 6], top_p_token_offsets=[0, 1])
    assert sample.response_length == 0 and sample.rollout_top_p_token_offsets is None


def test_check_reports_offsets_that_do_not_fit_the_response():
    sample = prompt_sample()
    sample.append_response([5, 6], log_probs=[-0.1, -0.2], top_p_token_ids=[5, 6], top_p_token_offsets=[0, 1, 2])
    sample.rollout_top_p_token_offsets.pop()
    with pytest.raises(
        ValueError, match="sample 3/1 is inconsistent: rollout_top_p_token_offsets: 2 offsets for 2 tokens"
    ):
        sample.check()
    sample.rollout_top_p_token_offsets.append(3)
    with pytest.raises(ValueError, match="not from 0 to the 2 ids"):
        sample.check()
