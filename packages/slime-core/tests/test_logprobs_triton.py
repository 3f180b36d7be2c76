"""The Triton log-prob kernels (`slime_core.algorithms.logprobs_triton`) against the chunked
float32 torch path on the same CUDA logits: values and gradients, several dtypes, a
temperature, a vocabulary smaller than one kernel block and Qwen's 151,936, rows that do not
start at the storage's beginning. Skipped without CUDA (the ``gpu`` marker)."""

import pytest
import torch

from slime_core.algorithms import logprobs

pytestmark = pytest.mark.gpu


def _torch_path(logits, tokens, temperature):
    return logprobs._ChunkedLogProbs.apply(logits, tokens, None, temperature, 256)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("vocab,temperature", [(1000, 1.0), (151936, 0.7)])
def test_triton_log_probs_and_gradient_equal_the_chunked_torch_path(dtype, vocab, temperature):
    generator = torch.Generator(device="cuda").manual_seed(vocab)
    wide = (torch.randn(301, vocab + 8, device="cuda", generator=generator) * 4).to(dtype)
    logits = wide[1:, :vocab]  # rows with a stride wider than the vocabulary, offset storage
    tokens = torch.randint(vocab, (300,), device="cuda", generator=generator)
    grad_out = torch.randn(300, device="cuda", generator=generator)
    assert logprobs.triton_applies(logits)

    results = []
    for compute in (
        lambda x: logprobs.log_probs_from_logits(x, tokens, temperature),
        lambda x: _torch_path(x, tokens, temperature),
    ):
        leaf = wide.detach().clone().requires_grad_(True)
        values = compute(leaf[1:, :vocab])
        values.backward(grad_out)
        assert not leaf.grad[0].any() and not leaf.grad[:, vocab:].any()
        results.append((values.detach(), leaf.grad[1:, :vocab]))
    (triton_values, triton_grad), (torch_values, torch_grad) = results

    assert triton_values.dtype == torch.float32 and triton_grad.dtype == dtype
    torch.testing.assert_close(triton_values, torch_values, rtol=1e-5, atol=1e-5)
    grad_tolerance = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}[
        dtype
    ]  # exp differs in the last bits
    torch.testing.assert_close(triton_grad.float(), torch_grad.float(), rtol=grad_tolerance, atol=1e-5)
    # the gradient of each row sums to g·(1 − Σp) = 0: mass moves towards the token
    assert triton_grad.float().sum(-1).abs().max() < 1e-3 * vocab**0.5


def test_a_keep_mask_takes_the_torch_path():
    logits = torch.randn(4, 50, device="cuda")
    keep = torch.ones(4, 50, dtype=torch.bool, device="cuda")
    keep[:, 25:] = False
    tokens = torch.arange(4, device="cuda")
    expected = torch.log_softmax(logits[:, :25], -1).gather(1, tokens[:, None]).squeeze(1)
    torch.testing.assert_close(logprobs.log_probs_from_logits(logits, tokens, keep_mask=keep), expected)
