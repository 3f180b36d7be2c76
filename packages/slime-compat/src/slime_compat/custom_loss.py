"""``--custom-loss-function-path`` (with ``--loss-type custom_loss``): slime's loss from the
logits, as a ``needs_logits`` policy loss.

slime calls ``fn(args, batch, logits, sum_of_sample_mean) -> (loss, log)`` per micro-batch:
``logits`` [1, T, V] the model's outputs for the packed micro-batch (not divided by the
rollout temperature: slime's own loss divides them), ``batch`` slime's micro-batch dict
(per-sample 1-D tensors of response length, and ``unconcat_tokens`` / ``tokens``), and
``sum_of_sample_mean(x)`` the sum over samples of each sample's masked mean of the (Σ
response lengths,) ``x`` (the masked sum with ``--calculate-per-token-loss``). slime then
divides the loss and the logged values by the global batch's samples (its tokens with
``--calculate-per-token-loss``), which is what makes them this micro-batch's contribution to
the step, as our losses return it.

The logits are the Megatron backend's gathered over tensor parallelism (every rank holds the
whole vocabulary, padding ids dropped) and are float32, as slime's loss asserts. ``batch``
holds every key slime's asks for, ``None`` where there is no value as in slime (``values`` /
``returns``: no critic in a policy loss here; ``teacher_log_probs``: a teacher's enter the
advantages; ``multimodal_train_inputs``), and no ``packed_seq_params``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from slime_compat.args import slime_args
from slime_compat.functions import load_function
from slime_compat.train_math import _Rows

if TYPE_CHECKING:
    from slime_core.rank.policy_loss_config import PolicyLossConfig


def custom_loss(logits, inputs, denominators, config: PolicyLossConfig):
    """Our ``needs_logits`` loss contract calling slime's custom loss function."""
    args = slime_args(config.run_config)
    lengths = inputs.response_lengths.tolist()
    rows = _Rows(lengths, inputs.loss_mask)
    batch = _slime_batch(logits.tokens, inputs, rows)
    packed = torch.cat(logits.logits).float()[None]  # [1, T, V]
    reduce = _sum_of_sample_mean(batch["loss_masks"], inputs.sample_tokens, lengths, config.calculate_per_token_loss)
    loss, log = load_function(args.custom_loss_function_path)(args, batch, packed, reduce)
    scale = 1 / max(denominators.num_tokens if config.calculate_per_token_loss else denominators.num_samples, 1)
    metrics = {name: float(torch.as_tensor(value).detach().float()) * scale for name, value in log.items()}
    return loss * scale, metrics


custom_loss.needs_logits = True


def _slime_batch(tokens: list[torch.Tensor], inputs, rows: _Rows) -> dict:
    """slime's micro-batch dict: the keys slime's loss asks its batch for, ``None`` where there
    is no value (as slime's data iterator answers a key the rollout data lacks)."""
    split = lambda t: None if t is None else rows.split(t)  # noqa: E731
    return {
        "unconcat_tokens": tokens,
        "tokens": torch.cat(tokens)[None],
        "total_lengths": inputs.total_lengths.tolist(),
        "response_lengths": rows.lengths,
        "loss_masks": split(inputs.loss_mask.int()),
        "advantages": split(inputs.advantages),
        "log_probs": split(inputs.old_log_probs.detach()),
        "ref_log_probs": split(inputs.ref_log_probs),
        "rollout_log_probs": split(inputs.rollout_log_probs),
        "rollout_mask_sums": inputs.sample_tokens,
        "values": None,
        "returns": None,
        "teacher_log_probs": None,
        "multimodal_train_inputs": None,
    }


def _sum_of_sample_mean(loss_masks, sample_tokens, lengths: list[int], per_token: bool):
    """slime's reducer of a (Σ lengths,) per-token tensor over the micro-batch's samples."""
    denominators = [mask.sum() for mask in loss_masks] if sample_tokens is None else list(sample_tokens)

    def reduce(x: torch.Tensor) -> torch.Tensor:
        parts = zip(x.split(lengths), loss_masks, denominators)
        if per_token:
            return sum((x_i * mask).sum() for x_i, mask, _ in parts)
        return sum((x_i * mask).sum() / torch.clamp_min(torch.as_tensor(denom), 1) for x_i, mask, denom in parts)

    return reduce
