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
