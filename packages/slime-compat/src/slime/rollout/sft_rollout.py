"""slime.rollout.sft_rollout: slime's supervised rollout, for a rollout function that calls it.

Each prompt is a conversation (chat messages, ``--input-key messages``); its tokens are the
conversation as the chat template renders it, and its response runs from the first trained
assistant token to the end, with `MultiTurnLossMaskGenerator`'s mask. Named with
``--rollout-function-path``, it runs with no engine and no router started.
"""

from __future__ import annotations

import functools

from slime_compat.loss_mask import MultiTurnLossMaskGenerator, get_response_lengths
from slime_compat.sample import Sample

__all__ = ["generate_rollout"]


@functools.cache
def _mask_generator(checkpoint: str, tokenizer_type: str) -> MultiTurnLossMaskGenerator:
    from transformers import AutoTokenizer

    return MultiTurnLossMaskGenerator(AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=True), tokenizer_type)


def generate_rollout(args, rollout_id, data_buffer, evaluation=False):
    """``--rollout-batch-size`` groups of one sample each, with tokens and loss mask from the
    chat template (reward 0: the supervised loss needs none)."""
    if evaluation:
        raise ValueError("slime's SFT rollout has no evaluation; give --eval-function-path a function of its own")
    generator = _mask_generator(args.hf_checkpoint, getattr(args, "loss_mask_type", None) or "qwen")
    groups = data_buffer.get_samples(args.rollout_batch_size)
    for group in groups:
        if len(group) != 1:
            raise ValueError(
                f"slime's SFT rollout trains one sample per prompt, got groups of {len(group)}; "
                "use --n-samples-per-prompt 1"
            )
        _complete(group[0], generator)
    return groups


def _complete(sample: Sample, generator: MultiTurnLossMaskGenerator) -> None:
    token_ids, loss_mask = generator.get_loss_mask(sample.prompt, tools=sample.metadata.get("tools"))
    (response_length,) = get_response_lengths([loss_mask])
    sample.tokens, sample.response_length = token_ids, response_length
    sample.loss_mask = loss_mask[len(loss_mask) - response_length :]
    sample.rollout_log_probs = [0.0] * response_length  # ours keeps one per response token; nothing reads them here
    sample.reward = 0.0
    sample.status = Sample.Status.COMPLETED
