"""``slime engine serve --enable-deterministic-inference`` (SGLang's flag; slime's
``--true-on-policy-mode`` turns it on): output log-probs that do not depend on which other
requests were decoded with a request.

The engine still decodes requests together (the sampled tokens are drawn as before); once a
request is done, its output tokens' log-probs are computed again from one forward pass of the
request's sequence alone (`slime_core.algorithms.batch_invariant`, the same functions the FSDP
trainer uses in that mode, on as many threads), and those are the ones reported. The cost is that extra forward
pass per request, on the scheduler thread (generation waits meanwhile).
"""

from __future__ import annotations

import torch

from slime_core.algorithms.batch_invariant import fixed_threads, sequence_inputs, sequence_log_probs
from slime_sglang.cpu_engine.request import GenerateRequest


def report_alone(model, request: GenerateRequest, result: dict) -> None:
    """Replace the log-probs of ``result``'s ``output_token_logprobs`` by those of the sequence
    alone (at the request's temperature; 1 for greedy requests, as sampling reports them).
    Run on the scheduler thread."""
    entries = result["meta_info"].get("output_token_logprobs")
    if not entries:
        return
    tokens = request.input_ids + request.output_ids[: len(entries)]
    with torch.no_grad(), fixed_threads():
        inputs = sequence_inputs(tokens, "cpu")
        logits = model(**inputs).logits
        values = sequence_log_probs(logits, inputs["input_ids"], len(entries), request.params.temperature or 1.0)
    for entry, value in zip(entries, values.tolist()):
        entry[0] = value
