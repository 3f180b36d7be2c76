"""``--custom-reward-post-process-path`` and ``--custom-convert-samples-to-train-data-path``:
slime's train-data functions behind our reward post-processor and train-data converter.

slime calls ``fn(args, samples) -> (raw_rewards, rewards)`` where its own code would normalise
the rewards per group, and ``fn(args, samples) -> dict`` instead of its whole conversion of
samples into train data (which then never calls the post-process function). Both get the
rollout's samples as one flat list. The dict's per-entry lists are mapped onto our
`RolloutBatch` (`batch_from_train_data`); as in slime, its ``rewards`` are trained on as they
are (never normalised again) and its ``raw_reward`` is what is logged as the reward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_compat.args import slime_args
from slime_compat.functions import load_function
from slime_compat.sample import promote_all
from slime_core.rollout_batch import RolloutBatch

if TYPE_CHECKING:
    from slime_core.config.config import Config

#: slime's train-data keys that our RolloutBatch holds -> what each entry must hold
REQUIRED = {
    "tokens": "the prompt + response token ids",
    "response_lengths": "how many of the tokens, at the end, are the response",
    "loss_masks": "one 0/1 per response token (1: trained on)",
    "rewards": "the reward trained on (already post-processed: it is not normalised again)",
}
#: keys slime's default conversion adds for its own logging or batching, which our loop
#: derives itself: accepted, not used
DERIVED = {"truncated", "sample_indices", "rollout_mask_sums", "total_lengths", "round_number", "source_names"}
#: keys slime's trainer reads that ours has no use for -> why, and what to do instead
UNSUPPORTED = {
    "multimodal_train_inputs": "our train backends train on token ids only",
    "metadata": "per-sample train metadata reaches only slime's Megatron loss functions, which run nowhere here",
}
#: the optional keys we map, beyond REQUIRED (``group_indices`` is ours, not slime's)
OPTIONAL = (
    "raw_reward",
    "rollout_log_probs",
    "rollout_ids",
    "rollout_top_p_token_ids",
    "rollout_top_p_token_offsets",
    "teacher_log_probs",
    "rollout_routed_experts",
    "group_indices",
)


def train_data_problems(config: Config) -> list[str]:
    """Both flags given: slime calls the post-process function only from the conversion that
    the converter replaces, so it would never run there."""
    post, convert = (
        config.get("custom_reward_post_process_path"),
        config.get("custom_convert_samples_to_train_data_path"),
    )
    if not (post and convert):
        return []
    return [
        f"--custom-reward-post-process-path {post} has no effect with --custom-convert-samples-to-train-data-path "
        "(slime calls it only from the conversion the converter replaces); drop it, or call it from the converter"
    ]


def reward_post_process(samples, config: Config) -> tuple[list, list]:
    """Our reward post-processor contract calling slime's. The ``teacher_log_probs`` it sets on
    the samples (slime's on-policy distillation: `slime_compat.distillation`) are trained on;
    slime's tensors become the core field's list of floats, which saved samples hold as JSON."""
    samples = promote_all(samples)
    rewards = load_function(config.custom_reward_post_process_path)(slime_args(config), samples)
    for sample in samples:
        if sample.teacher_log_probs is not None:
            sample.teacher_log_probs = [float(lp) for lp in sample.teacher_log_probs]
    return rewards


def convert_samples_to_train_data(samples, config: Config) -> RolloutBatch:
    """Our train-data converter contract calling slime's."""
    path = config.custom_convert_samples_to_train_data_path
    data = load_function(path)(slime_args(config), promote_all(samples))
    return batch_from_train_data(data, samples, config, f"--custom-convert-samples-to-train-data-path {path}")


def batch_from_train_data(data, samples, config: Config, source: str) -> RolloutBatch:
    """slime's train-data dict as a `RolloutBatch`. Each entry's prompt group, engine
    log-probs and nuclei come from the dict (``group_indices``, ``rollout_log_probs``, the
    ``rollout_top_p_*`` keys) or, when its entries are the samples in order (same tokens),
    from the samples; ``rollout_ids`` make entries of one group with one id one rollout."""
    if not isinstance(data, dict):
        raise TypeError(f"{source} returned a {type(data).__name__}; it must return slime's train-data dict")
    _check_keys(data, source)
    tokens = [_as_list(t) for t in data["tokens"]]
    count = len(tokens)
    column = _Columns(data, count, samples if _in_order(samples, tokens) else None, source)
    group_ids = column.get(
        "group_indices", "group_index", "the Sample.group_index it comes from (a group trains on one rank)"
    )
    rewards = column.get("rewards")
    batch = RolloutBatch(
        tokens=tokens,
        response_lengths=column.get("response_lengths"),
        loss_masks=column.get("loss_masks"),
        rewards=rewards,
        group_ids=group_ids,
        rollout_log_probs=column.get(
            "rollout_log_probs", "rollout_log_probs", "the engine's log-prob of each response token"
        ),
        raw_rewards=column.get("raw_reward") if "raw_reward" in data else rewards,
    )
    if config.rollout_top_p < 1:
        what = "its top-p nucleus (--rollout-top-p < 1 trains over them)"
        batch.top_p_token_ids = column.get("rollout_top_p_token_ids", "rollout_top_p_token_ids", what)
        batch.top_p_token_offsets = column.get("rollout_top_p_token_offsets", "rollout_top_p_token_offsets", what)
    if "teacher_log_probs" in data:  # on-policy distillation: trained on with --opd-kl-coef
        batch.teacher_log_probs = column.get("teacher_log_probs")
    if config.use_rollout_routing_replay:
        what = "the experts the engine routed each token to (--use-rollout-routing-replay replays them)"
        routed = column.get("rollout_routed_experts", "rollout_routed_experts", what)
        batch.routed_experts = [[_flat(row) for row in rows] for rows in routed]
    if "rollout_ids" in data:
        batch.rollout_ids = [(group, "rollout", rid) for group, rid in zip(group_ids, column.get("rollout_ids"))]
    _check_masks(batch, source)
    return batch


class _Columns:
    """The dict's per-entry lists, checked for length, with fallbacks from the samples."""

    def __init__(self, data: dict, count: int, samples, source: str):
        self.data, self.count, self.samples, self.source = data, count, samples, source

    def get(self, key: str, sample_field: str | None = None, what: str = "") -> list:
        """``data[key]``, or each entry's sample's ``sample_field``; an error naming the key."""
        if key in self.data:
            values = [_as_list(v) for v in self.data[key]]
            if len(values) != self.count:
                raise ValueError(
                    f"{self.source}: '{key}' has {len(values)} entries and 'tokens' {self.count}; "
                    "every list of the train data needs one entry per training sample"
                )
            return values
        if sample_field is None or self.samples is None:
            raise ValueError(
                f"{self.source}: the train data has no '{key}' and its entries are not the samples it got, "
                f"in order; add '{key}': one per entry, {what}"
            )
        return [_as_list(getattr(sample, sample_field)) for sample in self.samples]


def _check_keys(data: dict, source: str) -> None:
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise ValueError(
            f"{source}: the train data lacks {', '.join(missing)}; add, one per entry: "
            + "; ".join(f"'{key}': {REQUIRED[key]}" for key in missing)
        )
    for key in data:
        if key in UNSUPPORTED:
            raise ValueError(f"{source}: slime-compat cannot train on the train data's '{key}': {UNSUPPORTED[key]}")
        if key not in REQUIRED and key not in DERIVED and key not in OPTIONAL:
            known = ", ".join([*REQUIRED, *OPTIONAL, *sorted(DERIVED)])
            raise ValueError(f"{source}: unknown train-data key '{key}'; slime-compat reads {known}")


def _check_masks(batch: RolloutBatch, source: str) -> None:
    for i, (mask, length) in enumerate(zip(batch.loss_masks, batch.response_lengths)):
        if len(mask) != length:
            raise ValueError(
                f"{source}: entry {i} has a loss mask of {len(mask)} values for a response of {length} "
                "tokens; give one 0/1 per response token"
            )


def _in_order(samples, tokens: list[list[int]]) -> bool:
    """Whether the entries are the samples themselves, in order (slime's own conversion)."""
    return len(samples) == len(tokens) and all(list(s.tokens) == t for s, t in zip(samples, tokens))


def _flat(row) -> list[int]:
    """One token's routed experts as num_layers × top_k ids (slime's rows are (num_layers, top_k))."""
    return [int(i) for layer in row for i in layer] if row and isinstance(row[0], list) else [int(i) for i in row]


def _as_list(value):
    """A per-entry value as plain Python (slime's functions often hand tensors)."""
    return value.tolist() if hasattr(value, "tolist") else list(value) if isinstance(value, (list, tuple)) else value
