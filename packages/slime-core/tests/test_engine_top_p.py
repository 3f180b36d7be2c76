"""Top-p replay through the ``/generate`` codec: SGLang's base64 int32 nuclei (or JSON lists)
become the sample's nuclei, and a rollout batch carries them only with replay on, refusing a
trained token without one."""

import pytest

from slime_core import Sample
from slime_core.engine import append_result, decode_int32s, encode_int32s, parse_generate
from slime_core.rollout_batch import RolloutBatch


def answer(nuclei: list[list[int]], encode=encode_int32s) -> dict:
    offsets = [0]
    for nucleus in nuclei:
        offsets.append(offsets[-1] + len(nucleus))
    tokens = [nucleus[0] for nucleus in nuclei]
    return {
        "text": "ab",
        "output_ids": tokens,
        "meta_info": {
            "finish_reason": {"type": "length"},
            "output_token_logprobs": [[-0.5, t, None] for t in tokens],
            "top_p_token_ids": encode([t for nucleus in nuclei for t in nucleus]),
            "top_p_token_offsets": encode(offsets),
        },
    }


def test_int32_codec_round_trips_and_is_sglang_s_little_endian_base64():
    assert encode_int32s([1, 258]) == "AQAAAAIBAAA="  # 01 00 00 00 | 02 01 00 00
    assert decode_int32s(encode_int32s([0, 151935, 7])) == [0, 151935, 7]
    assert decode_int32s([4, 5]) == [4, 5] and decode_int32s(None) is None


@pytest.mark.parametrize("encode", [encode_int32s, list], ids=["base64", "json-list"])
def test_a_generate_answer_s_nuclei_reach_the_sample(encode):
    sample = Sample(group_index=2, index=0, tokens=[1, 2])
    append_result(sample, parse_generate(answer([[7, 3], [4]], encode)))
    assert (sample.rollout_top_p_token_ids, sample.rollout_top_p_token_offsets) == ([7, 3, 4], [0, 2, 3])


def test_an_answer_without_nuclei_leaves_none():
    sample = Sample(group_index=2, index=0, tokens=[1, 2])
    body = answer([[7], [4]])
    del body["meta_info"]["top_p_token_ids"], body["meta_info"]["top_p_token_offsets"]
    append_result(sample, parse_generate(body))
    assert sample.rollout_top_p_token_offsets is None and sample.response_length == 2


def test_the_batch_carries_nuclei_only_with_replay_and_hands_out_a_micro_batch_s():
    samples = [Sample(group_index=g, index=0, tokens=[1, 2], reward=1.0) for g in range(3)]
    for sample, nuclei in zip(samples, ([[7, 3], [4]], [[5]], [[6, 1, 2]])):
        append_result(sample, parse_generate(answer(nuclei)))
    assert RolloutBatch.from_samples(samples).nuclei([0]) is None
    batch = RolloutBatch.from_samples(samples, top_p_replay=True)
    assert batch.nuclei([2, 0]) == ([[6, 1, 2], [7, 3, 4]], [[0, 3], [0, 2, 3]])


def test_replay_refuses_a_trained_token_without_a_nucleus_naming_the_sample():
    with_nuclei = Sample(group_index=0, index=0, tokens=[1, 2], reward=1.0)
    append_result(with_nuclei, parse_generate(answer([[7, 3]])))
    with_nuclei.append_response([9], trainable=False)  # tool output needs none
    without = Sample(group_index=4, index=1, tokens=[1, 2], reward=1.0)
    without.append_response([5], log_probs=[-0.1])
    RolloutBatch.from_samples([with_nuclei], top_p_replay=True)
    with pytest.raises(ValueError, match="sample 4/1 has no top-p nucleus for 1 of its trained tokens"):
        RolloutBatch.from_samples([with_nuclei, without], top_p_replay=True)
