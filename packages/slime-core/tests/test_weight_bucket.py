"""`WeightBucket`: weights as safetensors bytes, from a train rank to the driver and the engines."""

import pickle

import pytest
import torch

from slime_core.rank.weight_bucket import WeightBucket


def test_a_bucket_gives_back_its_tensors_with_names_and_dtypes():
    embedding = torch.randn(6, 4)
    named = [
        ("a.weight", torch.randn(3, 4)),
        ("b.bias", torch.arange(5, dtype=torch.bfloat16)),
        ("embed.weight", embedding),
        ("lm_head.weight", embedding),
    ]  # tied: one memory, two names
    bucket = pickle.loads(pickle.dumps(WeightBucket.pack(named)))  # as Ray sends it
    got = dict(bucket)
    assert sorted(got) == ["a.weight", "b.bias", "embed.weight", "lm_head.weight"]
    for name, expected in named:
        assert got[name].dtype == expected.dtype and torch.equal(got[name], expected)
    assert 4 * (12 + 24) + 2 * 5 < bucket.nbytes < 4 * (12 + 24) + 2 * 5 + 1024  # the data and a small header


def test_a_name_given_twice_is_refused():
    with pytest.raises(ValueError, match="occurs twice"):
        WeightBucket.pack([("a.weight", torch.zeros(2)), ("a.weight", torch.ones(2))])
