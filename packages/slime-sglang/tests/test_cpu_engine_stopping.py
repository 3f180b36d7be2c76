"""Finish reasons and answered text, with the tiny model's character tokenizer (EOS id 1)."""

from __future__ import annotations

from slime_core.tools.tiny_models import build_char_tokenizer
from slime_sglang.cpu_engine.request import GenerateRequest
from slime_sglang.cpu_engine.sampling import SamplingParams
from slime_sglang.cpu_engine.stopping import StopChecker

TOKENIZER = build_char_tokenizer()
EOS = TOKENIZER.eos_token_id
CHECKER = StopChecker(TOKENIZER, {EOS})


def finished(text: str, eos: bool = False, **params) -> GenerateRequest:
    """A request whose output so far is ``text`` (then EOS), with its finish reason checked."""
    request = GenerateRequest("r", [5], SamplingParams(**params), return_logprob=False)
    request.output_ids = TOKENIZER.encode(text) + ([EOS] if eos else [])
    request.finish_reason = CHECKER.finish_reason(request)
    return request


def test_eos_stops_unless_ignored_and_is_not_in_the_text():
    request = finished("hi", eos=True)
    assert request.finish_reason == {"type": "stop", "matched": EOS}
    assert CHECKER.text(request) == "hi"
    assert finished("hi", eos=True, ignore_eos=True).finish_reason is None


def test_length_wins_when_the_last_allowed_token_is_a_stop_token():
    assert finished("ab", eos=True, max_new_tokens=3).finish_reason == {"type": "length", "length": 3}


def test_a_stop_token_id_is_cut_from_the_text_unless_no_stop_trim():
    stop = TOKENIZER.convert_tokens_to_ids("!")
    assert finished("wow!", stop_token_ids=frozenset({stop})).finish_reason == {"type": "stop", "matched": stop}
    assert CHECKER.text(finished("wow!", stop_token_ids=frozenset({stop}))) == "wow"
    assert CHECKER.text(finished("wow!", stop_token_ids=frozenset({stop}), no_stop_trim=True)) == "wow!"


def test_the_text_ends_before_the_matched_stop_string():
    request = finished("answer: 42\nend", stop=("\nend", "zz"))
    assert request.finish_reason == {"type": "stop", "matched": "\nend"}
    assert CHECKER.text(request) == "answer: 42"
    assert CHECKER.text(finished("answer: 42\nend", stop=("\nend",), no_stop_trim=True)) == "answer: 42\nend"
    assert finished("answer: 42\nen", stop=("\nend",)).finish_reason is None


def test_min_new_tokens_holds_back_eos_and_stop_tokens_until_reached():
    """SGLang's min_new_tokens: below it nothing stops the output, and EOS and the stop token ids
    are never drawn (their logits are -inf); at it, they stop as usual."""
    import torch

    stop = TOKENIZER.convert_tokens_to_ids("!")
    assert finished("ab", eos=True, min_new_tokens=4).finish_reason is None
    assert finished("abc!", stop_token_ids=frozenset({stop}), min_new_tokens=4).finish_reason["matched"] == stop
    short, done = finished("ab", min_new_tokens=4), finished("abcd", min_new_tokens=4)
    logits = torch.zeros(2, len(TOKENIZER))
    held = CHECKER.hold_back(logits, [short, done])
    assert held[0, EOS] == float("-inf") and torch.isfinite(held[1]).all() and torch.isfinite(logits).all()
    stopped = CHECKER.hold_back(logits[:1], [finished("ab", min_new_tokens=4, stop_token_ids=frozenset({stop}))])
    assert stopped[0, stop] == float("-inf") and torch.isfinite(stopped[0]).sum() == len(TOKENIZER) - 2
