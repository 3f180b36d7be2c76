import math

import pytest
import torch

from slime_core.algorithms import entropy_from_logits, log_probs_from_logits, nucleus_keep_mask

# softmax([0, ln2, ln3]) = [1/6, 1/3, 1/2]
LOGITS = torch.tensor([[0.0, math.log(2.0), math.log(3.0)]])


def _naive(logits, tokens, temperature=1.0, keep_mask=None):
    z = logits.float() / temperature
    if keep_mask is not None:
        z = z.masked_fill(~keep_mask, float("-inf"))
    log_p = torch.log_softmax(z, dim=-1)
    entropy = -(log_p.exp() * log_p.nan_to_num(neginf=0.0)).sum(-1)
    return log_p.gather(-1, tokens[..., None]).squeeze(-1), entropy


def test_log_prob_and_entropy_by_hand():
    assert log_probs_from_logits(LOGITS, torch.tensor([2])).item() == pytest.approx(math.log(0.5))
    entropy = -(1 / 6 * math.log(1 / 6) + 1 / 3 * math.log(1 / 3) + 1 / 2 * math.log(1 / 2))
    assert entropy_from_logits(LOGITS).item() == pytest.approx(entropy)


def test_temperature_divides_the_logits():
    # logits / 2 -> probabilities ∝ [1, √2, √3]
    total = 1 + math.sqrt(2) + math.sqrt(3)
    got = log_probs_from_logits(LOGITS, torch.tensor([1]), temperature=2.0)
    assert got.item() == pytest.approx(math.log(math.sqrt(2) / total), rel=1e-6)


def test_keep_mask_renormalises_over_the_kept_tokens():
    keep = torch.tensor([[True, True, False]])
    # kept probabilities [1/3, 2/3]
    assert log_probs_from_logits(LOGITS, torch.tensor([1]), keep_mask=keep).item() == pytest.approx(math.log(2 / 3))
    entropy = -(1 / 3 * math.log(1 / 3) + 2 / 3 * math.log(2 / 3))
    assert entropy_from_logits(LOGITS, keep_mask=keep).item() == pytest.approx(entropy, rel=1e-6)


@pytest.mark.parametrize("temperature, use_keep", [(1.0, False), (0.7, True)])
def test_chunked_values_and_gradients_equal_the_unchunked_ones(temperature, use_keep):
    torch.manual_seed(0)
    logits = (3 * torch.randn(2, 37, 50)).requires_grad_()
    tokens = torch.randint(0, 50, (2, 37))
    keep = (torch.rand(2, 37, 50) > 0.5).scatter_(-1, tokens[..., None], True) if use_keep else None
    upstream = torch.randn(2, 2, 37)
    log_probs = log_probs_from_logits(logits, tokens, temperature, chunk_size=8, keep_mask=keep)
    chunked = torch.stack([log_probs, entropy_from_logits(logits, temperature, chunk_size=8, keep_mask=keep)])
    (grad_chunked,) = torch.autograd.grad((chunked * upstream).sum(), logits)
    naive = torch.stack(_naive(logits, tokens, temperature, keep))
    (grad_naive,) = torch.autograd.grad((naive * upstream).sum(), logits)
    assert torch.allclose(chunked, naive, atol=1e-5)
    assert torch.allclose(grad_chunked, grad_naive, atol=1e-5)


def test_gradients_match_finite_differences_in_float64():
    torch.manual_seed(0)
    logits = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    tokens = torch.randint(0, 7, (5,))
    keep = (torch.rand(5, 7) > 0.3).scatter_(-1, tokens[:, None], True)
    assert torch.autograd.gradcheck(lambda x: log_probs_from_logits(x, tokens, 0.7, 2, keep), (logits,))
    assert torch.autograd.gradcheck(lambda x: entropy_from_logits(x, 0.7, 2, keep), (logits,))


def test_bf16_logits_give_float32_outputs_and_bf16_gradients():
    torch.manual_seed(0)
    logits = torch.randn(16, 40).bfloat16().requires_grad_()
    tokens = torch.randint(0, 40, (16,))
    log_probs = log_probs_from_logits(logits, tokens, chunk_size=5)
    assert log_probs.dtype == torch.float32
    assert torch.allclose(log_probs, _naive(logits.detach(), tokens)[0], atol=1e-6)
    log_probs.sum().backward()
    assert logits.grad.dtype == torch.bfloat16 and torch.isfinite(logits.grad.float()).all()


def test_logits_are_not_modified_and_no_grad_mode_works():
    logits = torch.randn(4, 9)
    before = logits.clone()
    with torch.no_grad():
        log_probs_from_logits(logits, torch.zeros(4, dtype=torch.long), temperature=0.5, chunk_size=3)
        entropy_from_logits(logits, temperature=0.5, chunk_size=3, keep_mask=logits > 0)
    assert torch.equal(logits, before)


# Two samples over a 6-token vocabulary. Sample 0 drew its tokens 3 and 2 from the nuclei {1, 3}
# and {2}. Sample 1's first token is tool output (no nucleus); its second, 4, was drawn just
# outside the reported nucleus {0, 5} (a sampling kernel at the nucleus boundary).
NUCLEUS_IDS = [[1, 3, 2], [0, 5]]
NUCLEUS_OFFSETS = [[0, 2, 3], [0, 0, 2]]
NUCLEUS_TARGETS = torch.tensor([3, 2, 1, 4])


def _rows(*kept_columns, width=6):
    return torch.tensor([[column in kept for column in range(width)] for kept in kept_columns])


def test_nucleus_keep_mask_keeps_each_nucleus_its_target_and_whole_rows_without_one():
    keep = nucleus_keep_mask(NUCLEUS_IDS, NUCLEUS_OFFSETS, NUCLEUS_TARGETS, vocab_width=6)
    assert torch.equal(keep, _rows({1, 3}, {2}, set(range(6)), {0, 4, 5}))


def test_nucleus_keep_mask_of_a_vocabulary_slice_holds_the_slice_s_columns():
    """A tensor-parallel rank holding ids 3..5: ids outside it are not its columns, and a row
    whose nucleus lies wholly elsewhere keeps none of them (the other slice has its tokens)."""
    upper = nucleus_keep_mask(NUCLEUS_IDS, NUCLEUS_OFFSETS, NUCLEUS_TARGETS, vocab_width=3, vocab_start=3)
    assert torch.equal(upper, _rows({0}, set(), {0, 1, 2}, {1, 2}, width=3))
    lower = nucleus_keep_mask(NUCLEUS_IDS, NUCLEUS_OFFSETS, NUCLEUS_TARGETS, vocab_width=3)
    whole = nucleus_keep_mask(NUCLEUS_IDS, NUCLEUS_OFFSETS, NUCLEUS_TARGETS, vocab_width=6)
    assert torch.equal(torch.cat([lower, upper], dim=1), whole)


def test_log_probs_over_a_nucleus_renormalise_over_it():
    # token 4 of sample 1: equal logits, kept {0, 4, 5} -> 1/3; token 2 of sample 0: its nucleus alone -> 1
    keep = nucleus_keep_mask(NUCLEUS_IDS, NUCLEUS_OFFSETS, NUCLEUS_TARGETS, vocab_width=6)
    log_probs = log_probs_from_logits(torch.zeros(4, 6), NUCLEUS_TARGETS, keep_mask=keep)
    assert log_probs.tolist() == pytest.approx([math.log(1 / 2), 0.0, math.log(1 / 6), math.log(1 / 3)])


def test_nuclei_that_do_not_fit_the_tokens_are_refused():
    with pytest.raises(ValueError, match="nuclei for 4 response tokens but 3 targets"):
        nucleus_keep_mask(NUCLEUS_IDS, NUCLEUS_OFFSETS, NUCLEUS_TARGETS[:3], vocab_width=6)
    with pytest.raises(ValueError, match="offsets cover 2 ids but the sample has 3"):
        nucleus_keep_mask([[1, 3, 2]], [[0, 1, 2]], torch.tensor([1, 3]), vocab_width=6)


def test_entropy_over_logits_at_minus_infinity_is_the_entropy_of_the_rest():
    """A vision-language model's image placeholders are -inf logits: they add nothing to H nor to its
    gradient (0·log 0 is 0), instead of making both NaN."""
    logits = torch.randn(3, 7, dtype=torch.float64)
    masked = logits.clone().index_fill_(-1, torch.tensor([2, 5]), float("-inf")).requires_grad_()
    rest = logits[:, [0, 1, 3, 4, 6]].clone().requires_grad_()
    entropy = entropy_from_logits(masked, temperature=0.7)
    expected = entropy_from_logits(rest, temperature=0.7)
    torch.testing.assert_close(entropy, expected)
    entropy.sum().backward()
    expected.sum().backward()
    assert torch.equal(masked.grad[:, [2, 5]], torch.zeros(3, 2, dtype=torch.float64))
    torch.testing.assert_close(masked.grad[:, [0, 1, 3, 4, 6]], rest.grad)
