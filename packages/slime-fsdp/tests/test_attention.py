"""``slime_packed`` attention: packed rows without a (T, T) mask give what one row per sample gives."""

import pytest
import torch

from slime_fsdp import attention, inputs
from slime_fsdp.model import load_model

TOKENS = [[5, 9, 11, 4, 7], [3, 8, 30, 31, 12, 6, 9, 40, 41, 2, 7, 7, 8], [13, 14, 15], [20 + i for i in range(23)]]
RESPONSE_LENGTHS = [2, 6, 1, 9]


def _log_probs_and_grads(model, micro):
    model.zero_grad()
    per_sample = inputs.response_log_probs(model(**micro.model_inputs()).logits, micro, temperature=0.8)
    torch.cat(per_sample).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    return [lp.detach() for lp in per_sample], grads


def test_it_is_the_cpu_default_and_needs_no_mask(tiny_model_dir):
    model = load_model(tiny_model_dir)
    assert model.config._attn_implementation == attention.NAME
    assert inputs.packed(TOKENS, RESPONSE_LENGTHS, "cpu", attention.NAME).attention_mask is None


def test_packed_rows_match_padded_rows_in_values_and_gradients(tiny_model_dir):
    """The tiny model has grouped-query attention (4 query, 2 key-value heads)."""
    ours = load_model(tiny_model_dir)
    reference = load_model(tiny_model_dir, attn_implementation="eager")
    assert ours.config.num_key_value_heads < ours.config.num_attention_heads
    packed, packed_grads = _log_probs_and_grads(ours, inputs.packed(TOKENS, RESPONSE_LENGTHS, "cpu", attention.NAME))
    padded, padded_grads = _log_probs_and_grads(reference, inputs.padded(TOKENS, RESPONSE_LENGTHS, "cpu", 0))
    for a, b in zip(packed, padded):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for name, grad in packed_grads.items():
        torch.testing.assert_close(grad, padded_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_sample_does_not_see_its_neighbours(tiny_model_dir):
    model = load_model(tiny_model_dir)
    changed = [TOKENS[0], [t + 1 for t in TOKENS[1]], *TOKENS[2:]]
    with torch.no_grad():
        before, after = (
            inputs.response_log_probs(
                model(**inputs.packed(t, RESPONSE_LENGTHS, "cpu", attention.NAME).model_inputs()).logits,
                inputs.packed(t, RESPONSE_LENGTHS, "cpu", attention.NAME),
                1.0,
            )
            for t in (TOKENS, changed)
        )
    assert torch.equal(before[2], after[2]) and torch.equal(before[3], after[3])
    assert not torch.equal(before[1], after[1])


def test_padded_rows_work_without_a_padding_mask(tiny_model_dir):
    """Right padding never reaches a real token under causal attention."""
    ours = load_model(tiny_model_dir)
    micro = inputs.padded(TOKENS, RESPONSE_LENGTHS, "cpu", 0)
    with torch.no_grad():
        padded = inputs.response_log_probs(ours(**micro.model_inputs()).logits, micro, 1.0)
        alone = [
            inputs.response_log_probs(ours(**m.model_inputs()).logits, m, 1.0)[0]
            for m in (inputs.padded([t], [r], "cpu", 0) for t, r in zip(TOKENS, RESPONSE_LENGTHS))
        ]
    for a, b in zip(padded, alone):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_without_position_ids_it_says_what_is_missing():
    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(ValueError, match="needs position_ids"):
        attention.packed_attention(torch.nn.Module(), q, q, q, None)


def test_length_buckets_cover_every_sample_and_bound_the_padding():
    lengths = [9, 8, 9, 3, 120, 8, 40, 9, 37, 5, 9, 2000]
    buckets = attention.length_buckets(lengths)
    assert sorted(i for bucket in buckets for i in bucket) == list(range(len(lengths)))
    for bucket in buckets:
        assert len(bucket) * max(lengths[i] for i in bucket) <= 1.25 * sum(lengths[i] for i in bucket)
    assert [lengths[i] for i in buckets[-1]] == [2000]  # a long sample is padded to nothing
    # a GRPO rollout of short answers: one sdpa call per layer, not one per sample
    assert len(attention.length_buckets([8, 9] * 128)) == 1
