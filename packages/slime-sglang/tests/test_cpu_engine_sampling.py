"""The CPU engine's sampler: truncation, seeds, top-p replay and the log-prob convention shared
with training."""

from __future__ import annotations

import math

import pytest
import torch

from slime_core.algorithms import log_probs_from_logits
from slime_sglang.cpu_engine.sampling import SamplingParams, sample_tokens

PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05])


def draw_many(params: SamplingParams, rows: int = 400) -> set[int]:
    logits = PROBS.log().repeat(rows, 1)
    tokens, _, _ = sample_tokens(logits, [params] * rows, [None] * rows)
    return set(tokens.tolist())


def test_top_k_and_top_p_draw_only_the_kept_tokens():
    torch.manual_seed(0)
    assert draw_many(SamplingParams()) == {0, 1, 2, 3}
    assert draw_many(SamplingParams(top_k=2)) == {0, 1}
    assert draw_many(SamplingParams(top_p=0.6)) == {0, 1}  # 0.5 before token 1 does not reach 0.6
    assert draw_many(SamplingParams(top_p=0.4)) == {0}
    assert draw_many(SamplingParams(top_k=3, top_p=0.9)) == {0, 1, 2}
    assert draw_many(SamplingParams(temperature=0)) == {0}


def test_log_probs_are_training_s_at_the_request_temperature():
    logits = torch.randn(3, 50)
    params = [SamplingParams(temperature=0.7), SamplingParams(temperature=0), SamplingParams(temperature=1.3, top_k=5)]
    tokens, log_probs, _ = sample_tokens(logits, params, [None] * 3)
    for row, temperature in enumerate([0.7, 1.0, 1.3]):  # greedy scores at temperature 1
        expected = log_probs_from_logits(logits[row], tokens[row], temperature)
        torch.testing.assert_close(log_probs[row], expected, atol=1e-6, rtol=0)
    assert tokens[1] == logits[1].argmax()


def test_a_seeded_row_draws_the_same_whatever_else_is_in_the_batch():
    logits = torch.randn(4, 50)
    params = [SamplingParams(sampling_seed=9)] + [SamplingParams()] * 3
    seeded = [sample_tokens(logits[:1], params[:1], [torch.Generator().manual_seed(9)])[0][0] for _ in range(2)]
    together = sample_tokens(logits, params, [torch.Generator().manual_seed(9), None, None, None])[0][0]
    assert seeded[0] == seeded[1] == together


def test_top_p_replay_reports_each_draw_s_nucleus_and_renormalises_its_log_prob():
    """PROBS = [0.5, 0.3, 0.15, 0.05]: top_p 0.6 keeps {0, 1} (mass 0.8); a greedy draw's nucleus
    is its token (log-prob 0); an unrestricted one's is empty (the whole vocabulary, log-prob
    unchanged); a row that does not ask gets none."""
    replay = dict(return_top_p_token_ids=True)
    params = [
        SamplingParams(top_p=0.6, **replay),
        SamplingParams(temperature=0, **replay),
        SamplingParams(**replay),
        SamplingParams(top_p=0.6),
    ]
    tokens, log_probs, nuclei = sample_tokens(PROBS.log().repeat(4, 1), params, [torch.Generator().manual_seed(1)] * 4)
    assert nuclei == [[0, 1], [0], [], None]
    assert tokens[0] in (0, 1) and tokens[1] == 0
    expected = [math.log(PROBS[tokens[0]] / 0.8), 0.0, math.log(PROBS[tokens[2]]), math.log(PROBS[tokens[3]])]
    assert log_probs.tolist() == pytest.approx(expected, abs=1e-6)
