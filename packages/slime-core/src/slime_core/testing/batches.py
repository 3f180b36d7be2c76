"""Train data for backend tests that need no engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slime_core.rollout_batch import RolloutBatch


def synthetic_rollout_batch(
    num_groups: int = 4, group_size: int = 4, seed: int = 0, max_response: int = 8
) -> RolloutBatch:
    """Addition prompts (character tokenizer) with random responses of 1..``max_response``
    tokens and random 0/1 rewards: train data for backend tests without an engine."""
    import random

    from slime_core.rollout_batch import RolloutBatch
    from slime_core.tools.tiny_models import build_char_tokenizer

    rng = random.Random(seed)
    tokenizer = build_char_tokenizer()
    batch = RolloutBatch()
    for group in range(num_groups):
        prompt = tokenizer.encode(f"{rng.randint(0, 49)}+{rng.randint(0, 49)}=")
        for _ in range(group_size):
            response = [rng.randrange(4, 100) for _ in range(rng.randint(1, max_response))]
            batch.tokens.append(prompt + response)
            batch.response_lengths.append(len(response))
            batch.loss_masks.append([1] * len(response))
            batch.rewards.append(float(rng.random() < 0.5))
            batch.group_ids.append(group)
            batch.rollout_log_probs.append([-1.0] * len(response))
    return batch
