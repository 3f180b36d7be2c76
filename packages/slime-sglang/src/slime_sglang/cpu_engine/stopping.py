"""When a request is done, and the text it answers with.

Checked after every new token in SGLang's order: ``max_new_tokens`` reached (finish reason
``length``), then, once ``min_new_tokens`` are out, a stop token id or the model's EOS (``stop``,
matched = the token id), then a stop string (``stop``, matched = the string). Below
``min_new_tokens``, stop token ids and EOS are not drawn at all (`hold_back`, SGLang's
min-new-tokens penalizer). ``output_ids`` keep every generated token;
the text leaves out the matched stop token or string (from the string on), unless the
request set ``no_stop_trim``.
"""

from __future__ import annotations

import torch

from slime_sglang.cpu_engine.request import GenerateRequest


class StopChecker:
    """Finish checks and text decoding with the served model's tokenizer and EOS ids."""

    def __init__(self, tokenizer, eos_token_ids: set[int]):
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(eos_token_ids)

    def finish_reason(self, request: GenerateRequest) -> dict | None:
        """The finish reason after the request's latest token, or None to go on."""
        params, output = request.params, request.output_ids
        if len(output) >= params.max_new_tokens:
            return {"type": "length", "length": params.max_new_tokens}
        if len(output) < params.min_new_tokens:
            return None
        token = output[-1]
        if token in params.stop_token_ids or (token in self.eos_token_ids and not params.ignore_eos):
            return {"type": "stop", "matched": token}
        if params.stop:
            # A stop string of n characters ends within the last n + 1 tokens (each token is >= 1 character).
            window = max(len(s) for s in params.stop) + 1
            tail = self.tokenizer.decode(output[-window:], skip_special_tokens=params.skip_special_tokens)
            for stop in params.stop:
                if stop in tail:
                    return {"type": "stop", "matched": stop}
        return None

    def hold_back(self, logits: torch.Tensor, requests: list[GenerateRequest]) -> torch.Tensor:
        """``logits`` (B, V) with the stop token ids and EOS of each request still short of its
        ``min_new_tokens`` set to -inf (a copy; the same tensor when no request is short)."""
        short = [(row, r) for row, r in enumerate(requests) if len(r.output_ids) < r.params.min_new_tokens]
        if not short:
            return logits
        logits = logits.clone()
        for row, request in short:
            ends = request.params.stop_token_ids | (frozenset() if request.params.ignore_eos else self.eos_token_ids)
            logits[row, [token for token in ends if token < logits.shape[-1]]] = float("-inf")
        return logits

    def text(self, request: GenerateRequest) -> str:
        """The decoded output, without the matched stop token or string unless no_stop_trim."""
        params, reason = request.params, request.finish_reason or {}
        matched = reason.get("matched") if reason.get("type") == "stop" else None
        trim = not params.no_stop_trim
        ids = request.output_ids[:-1] if trim and isinstance(matched, int) else request.output_ids
        text = self.tokenizer.decode(ids, skip_special_tokens=params.skip_special_tokens)
        if trim and isinstance(matched, str) and matched in text:
            text = text[: text.index(matched)]
        return text

    def token_texts(self, request: GenerateRequest) -> list[str] | None:
        """Each output token's own text when the request asked for it (return_text_in_logprobs)."""
        if not (request.return_logprob and request.return_text_in_logprobs):
            return None
        return self.tokenizer.batch_decode([[token] for token in request.output_ids])


def eos_token_ids(model, tokenizer) -> set[int]:
    """The ids that end generation: the model config's, its generation config's and the tokenizer's EOS."""
    found = set()
    for source in (model.config, getattr(model, "generation_config", None), tokenizer):
        value = getattr(source, "eos_token_id", None)
        found.update(value if isinstance(value, (list, tuple)) else [] if value is None else [value])
    return found
