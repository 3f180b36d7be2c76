"""SGLang's ``top_logprobs_num``: the k most likely tokens at each position, with their log-probs.

A request with ``return_logprob`` and ``top_logprobs_num`` k > 0 is answered as SGLang answers
it: ``meta_info["output_top_logprobs"]`` has, for each output token, the k most likely tokens at
its position as ``[logprob, token_id, text]`` (the token's text with ``return_text_in_logprobs``,
else null), most likely first, under the distribution its ``output_token_logprobs`` entry comes
from (``softmax(logits / temperature)``, temperature 1 for a greedy request); with
``logprob_start_len`` >= 0, ``input_top_logprobs`` has the same for each prompt token from that
position, under the model's own distribution (as ``input_token_logprobs``), null for the first
token, which nothing predicts. Without ``return_logprob`` the field asks for nothing, as in SGLang.

Both come from one forward over the prompt and the output once the request has finished, run
between two scheduler steps (the weights it was generated with, unless an update came in between).
"""

from __future__ import annotations

import torch

from slime_sglang.cpu_engine.request import GenerateRequest


def top_logprobs(model, tokenizer, request: GenerateRequest, **inputs) -> dict[str, list]:
    """``output_top_logprobs`` (and ``input_top_logprobs`` with ``logprob_start_len`` >= 0) of
    the finished ``request``, for its meta_info; ``inputs``: a vision-language model's images and
    positions for the forward (`Engine.image_forward_inputs`)."""
    prompt_length = len(request.input_ids)
    with torch.no_grad():  # row p predicts token p + 1
        logits = model(torch.tensor([request.input_ids + request.output_ids]), **inputs).logits[0, :-1].float()
    entries = _Entries(tokenizer, min(request.top_logprobs_num, logits.shape[-1]), request.return_text_in_logprobs)
    temperature = request.params.temperature or 1.0
    answer = {"output_top_logprobs": entries(logits[prompt_length - 1 :] / temperature)}
    start = request.logprob_start_len
    if start >= 0:
        first = [None] if start == 0 else []
        answer["input_top_logprobs"] = first + entries(logits[max(start, 1) - 1 : prompt_length - 1])
    return answer


class _Entries:
    """Each row's k most likely tokens as SGLang's ``[logprob, token_id, text]`` entries."""

    def __init__(self, tokenizer, k: int, with_text: bool):
        self.tokenizer, self.k, self.with_text = tokenizer, k, with_text

    def __call__(self, logits: torch.Tensor) -> list[list[list]]:
        values, ids = torch.log_softmax(logits, dim=-1).topk(self.k, dim=-1)
        rows = []
        for row_values, row_ids in zip(values.tolist(), ids.tolist()):
            texts = self.tokenizer.batch_decode([[t] for t in row_ids]) if self.with_text else [None] * self.k
            rows.append([list(entry) for entry in zip(row_values, row_ids, texts)])
        return rows
