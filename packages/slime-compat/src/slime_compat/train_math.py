"""slime's train-side math functions behind our plugin points; they run in the train ranks.

slime hands these functions per-sample lists (one 1-D tensor of response length per sample)
and concatenated per-token tensors; our RL math works on right-padded (B, T) rows. Each
adapter converts one way on the call and back on the return:

- ``--custom-advantage-function-path``: ``fn(args, rollout_data)`` after the KL (the
  ``kl`` key) and before on-policy distillation and ``--normalize-advantages``; it sets
  ``rollout_data["advantages"]`` and ``["returns"]``. ``rewards`` are what slime's reward
  post-processing gives (group-normalised as ``--advantage-estimator`` asks, see
  `slime_compat.train_options`; a ``--custom-reward-post-process-path``'s own), ``raw_reward``
  the rewards as scored; with ``--use-rollout-entropy``, ``entropy`` / ``ref_entropy``: each
  sample's per-token entropy of π_old / the reference model from their log-prob passes.
- ``--custom-tis-function-path``: ``fn(args=, pg_loss=, train_log_probs=, rollout_log_probs=,
  loss_masks=, total_lengths=, response_lengths=) -> (pg_loss, loss_masks, metrics)``, with
  ``--use-tis``; the metrics are per-token and reduced like the loss.
- ``--custom-pg-loss-reducer-function-path``: ``fn(total_lengths, response_lengths,
  loss_masks, calculate_per_token_loss) -> reduce``; ``reduce(pg_loss)`` is the micro-batch
  sum slime's backend then divides by the global batch's samples (its tokens with
  ``--calculate-per-token-loss``), as is done here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from slime_compat.args import slime_args
from slime_compat.functions import load_function
from slime_core.algorithms import approx_kl, group_normalize_rewards

if TYPE_CHECKING:
    from slime_core.rank.policy_loss_config import PolicyLossConfig


def custom_advantage(inputs):
    """Our advantage-estimator contract calling slime's ``fn(args, rollout_data)``."""
    args = slime_args(inputs.run_config)
    rollout_data = _rollout_data(inputs, args)
    load_function(args.custom_advantage_function_path)(args, rollout_data)
    rows, mask = _Rows(rollout_data["response_lengths"], inputs.loss_mask.float()), inputs.loss_mask
    advantages, returns = (
        rows.pad(_per_sample(rollout_data, key, len(mask), args.custom_advantage_function_path))
        for key in ("advantages", "returns")
    )
    return advantages * mask, returns * mask


custom_advantage.needs_old_log_probs = True  # slime's rollout_data always holds π_old ("log_probs")


def custom_tis(pg_loss, inputs, config: PolicyLossConfig):
    """Our TIS-function contract calling slime's, with slime's keyword arguments."""
    args = slime_args(config.run_config)
    lengths = inputs.response_lengths.tolist()
    rows = _Rows(lengths, inputs.loss_mask)
    pg_loss, masks, metrics = load_function(args.custom_tis_function_path)(
        args=args,
        pg_loss=rows.flat(pg_loss),
        train_log_probs=rows.split(inputs.old_log_probs),
        rollout_log_probs=rows.split(inputs.rollout_log_probs),
        loss_masks=rows.split(inputs.loss_mask.int()),
        total_lengths=inputs.total_lengths.tolist(),
        response_lengths=lengths,
    )
    return rows.unflat(pg_loss), rows.pad(masks), {name: rows.unflat(value) for name, value in metrics.items()}


def custom_pg_loss_reducer(pg_loss, loss_mask, inputs, denominators, config: PolicyLossConfig):
    """Our pg-loss-reducer contract calling slime's reducer factory (which gets no ``args``)."""
    run = config.run_config
    lengths = inputs.response_lengths.tolist()
    rows = _Rows(lengths, loss_mask)
    reduce = load_function(run.custom_pg_loss_reducer_function_path)(
        inputs.total_lengths.tolist(), lengths, rows.split(loss_mask.int()), config.calculate_per_token_loss
    )
    total = reduce(rows.flat(pg_loss))
    return total / max(denominators.num_tokens if config.calculate_per_token_loss else denominators.num_samples, 1)


class _Rows:
    """Right-padded (B, W) rows <-> slime's per-sample lists and concatenated tokens."""

    def __init__(self, lengths: list[int], like: torch.Tensor):
        self.lengths, self.like = lengths, like  # response tokens per row; a (B, W) tensor of the shape

    def split(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """One (length,) tensor per row."""
        return [row[:n] for row, n in zip(rows, self.lengths)]

    def flat(self, rows: torch.Tensor) -> torch.Tensor:
        """Every row's response tokens, concatenated: (Σ lengths,)."""
        return torch.cat(self.split(rows))

    def unflat(self, tokens: torch.Tensor) -> torch.Tensor:
        """The (B, W) rows of concatenated per-token values (0 on padding)."""
        return self.pad(list(torch.split(tokens, self.lengths)))

    def pad(self, per_sample: list[torch.Tensor]) -> torch.Tensor:
        """(B, W) rows of per-sample 1-D tensors, in the dtype of ``like``."""
        out = torch.zeros_like(self.like)
        for i, row in enumerate(per_sample):
            out[i, : len(row)] = torch.as_tensor(row).to(device=out.device, dtype=out.dtype)
        return out


def _rollout_data(inputs, args) -> dict:
    """slime's ``rollout_data`` on the rank at advantage time: per-sample lists (keys with no
    value are left out, as slime's dict lacks them)."""
    lengths = inputs.response_lengths.tolist()
    split = lambda t: None if t is None else [row[:n] for row, n in zip(t, lengths)]  # noqa: E731
    batch = inputs.batch
    rollout = None if batch is None else [torch.tensor(lp, dtype=torch.float32) for lp in batch.rollout_log_probs]
    log_probs, ref = split(inputs.log_probs), split(inputs.ref_log_probs)
    data = {
        "tokens": None if batch is None else [torch.tensor(t) for t in batch.tokens],
        "total_lengths": None if batch is None else [len(t) for t in batch.tokens],
        "response_lengths": lengths,
        "loss_masks": split(inputs.loss_mask.int()),
        "rewards": _post_processed_rewards(inputs).tolist(),
        "raw_reward": batch.raw_rewards
        if batch is not None and batch.raw_rewards is not None
        else inputs.rewards.tolist(),
        "log_probs": log_probs,
        "ref_log_probs": ref,
        "rollout_log_probs": rollout if rollout and all(len(r) for r in rollout) else None,
        "values": split(inputs.values),
        "kl": _kl(rollout if args.use_rollout_logprobs else log_probs, ref, inputs, lengths),
        "entropy": (inputs.entropy or {}).get("actor") or None,  # with --use-rollout-entropy
        "ref_entropy": (inputs.entropy or {}).get("ref") or None,  # ... and a reference model
    }
    return {key: value for key, value in data.items() if value is not None}


def _post_processed_rewards(inputs) -> torch.Tensor:
    """(B,) the rewards slime's reward post-processing hands the train ranks: centred per
    group (and divided by its std) as ``normalize_rewards`` / ``std_normalize`` say."""
    if not inputs.normalize_rewards:
        return inputs.rewards.float()
    return group_normalize_rewards(inputs.rewards, inputs.group_ids, inputs.std_normalize)


def _kl(log_probs, ref, inputs, lengths) -> list[torch.Tensor]:
    """slime's per-sample ``kl``: ``kl_loss_type``'s estimate of log π_old - log π_ref with a
    ``--kl-coef``, zeros without one."""
    if not inputs.kl_coef or log_probs is None or ref is None:
        return [torch.zeros(n) for n in lengths]
    return [approx_kl(lp, r, inputs.kl_type) for lp, r in zip(log_probs, ref)]


def _per_sample(rollout_data: dict, key: str, count: int, path: str) -> list:
    """``rollout_data[key]``, checked to hold one value per sample."""
    values = rollout_data.get(key)
    if values is None or len(values) != count:
        got = "nothing" if values is None else f"{len(values)} values"
        raise ValueError(
            f"--custom-advantage-function-path {path} must set rollout_data['{key}'] to one tensor per "
            f"sample ({count} here), as slime requires; it set {got}"
        )
    return [torch.as_tensor(value).detach() for value in values]
