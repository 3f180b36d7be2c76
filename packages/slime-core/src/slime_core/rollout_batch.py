"""`RolloutBatch`: the train data of one rollout, and its split across data-parallel ranks.

The driver turns the scored samples of a rollout into one `RolloutBatch` (plain lists, cheap
to send to Ray actors), splits it per data-parallel rank, and every train rank of any
backend receives its share. Groups stay whole on one rank, so group-relative advantages
(GRPO and friends) are computed on the rank with every member of the group at hand.

`train_batch` is that conversion as the loop runs it: a ``--train-data-converter`` plugin
may replace `RolloutBatch.from_samples`, and a ``--reward-post-process`` plugin may replace
the ranks' group normalisation of the rewards (then ``raw_rewards`` keeps what was scored).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from slime_core.faults.nonfinite import NonFiniteError
from slime_core.faults.run_error import RunError
from slime_core.multimodal.images import image_data
from slime_core.multimodal.videos import video_data
from slime_core.rollout.reward_hub import scalar_reward
from slime_core.sample import Sample, SampleStatus

if TYPE_CHECKING:
    from slime_core.config import Config


@dataclass
class RolloutBatch:
    """Per-sample lists, all of the same length N (the samples of a rollout, or a rank's share)."""

    tokens: list[list[int]] = field(default_factory=list)  # (N,) prompt + response token ids
    response_lengths: list[int] = field(default_factory=list)  # (N,) response tokens at the end of `tokens`
    loss_masks: list[list[int]] = field(default_factory=list)  # (N,) (response_len,) 1 = trained on
    rewards: list[float] = field(default_factory=list)  # (N,) scalar reward (after --reward-key), or post-processed
    group_ids: list[int] = field(default_factory=list)  # (N,) samples of one prompt share an id
    rollout_log_probs: list[list[float]] = field(default_factory=list)  # (N,) (response_len,) engine log-probs
    values: list[list[float]] | None = None  # (N,) (response_len,) critic values V_old (PPO), else None
    # Top-p replay (--rollout-top-p < 1), else None: each sample's nuclei (`Sample.rollout_top_p_token_ids`
    # and offsets); the train backends score log-probs over them (`slime_core.algorithms.nucleus_keep_mask`).
    top_p_token_ids: list[list[int]] | None = None  # (N,) (nuclei ids,)
    top_p_token_offsets: list[list[int]] | None = None  # (N,) (response_len + 1,)
    # Rollout routing replay (--use-rollout-routing-replay), else None: the experts the engine routed each
    # token to (`Sample.rollout_routed_experts`), which the train backends replay (`slime_core.routing_replay`).
    routed_experts: list[list[list[int]]] | None = None  # (N,) (len(tokens) - 1,) (num_layers * top_k,)
    rollout_ids: list[tuple] | None = None  # (N,) with --rollout-id-key: one rollout's samples share it (`rollout_id`)
    # (N,) the rewards as scored when `rewards` are post-processed (--reward-post-process, a converter): the ranks
    # then train on `rewards` as they are, without group normalisation; None: `rewards` are the scored ones.
    raw_rewards: list[float] | None = None
    # (N,) (response_len,) on-policy distillation's teacher log-probs when the samples carry them
    # (`Sample.teacher_log_probs`): the ranks train on them with --opd-kl-coef; None: none carried.
    teacher_log_probs: list[list[float]] | None = None
    # (N,) each sample's prompt images as PNG data URLs (`Sample.multimodal_inputs`), for a vision-language
    # model's trainer; None: no sample has images.
    images: list[list[str]] | None = None
    # (N,) each sample's prompt videos, each a list of its frames as PNG data URLs; None: no sample has videos.
    videos: list[list[list[str]]] | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def from_samples(
        cls,
        samples: list[Sample],
        reward_key: str | None = None,
        top_p_replay: bool = False,
        rollout_id_key: str | None = None,
        rewards: list[float] | None = None,
        routing_replay: bool = False,
    ) -> RolloutBatch:
        """The `trainable` samples of a rollout, in order; with ``top_p_replay``
        (``--rollout-top-p`` < 1) their nuclei too, which every trained token needs; with
        ``rollout_id_key`` (``--rollout-id-key``) the rollout each comes from (`rollout_id`);
        ``rewards``: one per trainable sample, instead of their scored rewards; with ``routing_replay``
        (``--use-rollout-routing-replay``) their routed experts."""
        batch = cls(top_p_token_ids=[] if top_p_replay else None, top_p_token_offsets=[] if top_p_replay else None)
        batch.rollout_ids = [] if rollout_id_key else None
        batch.teacher_log_probs = carried_teacher_log_probs(trainable(samples))
        batch.routed_experts = [] if routing_replay else None
        for i, sample in enumerate(trainable(samples)):
            sample.check()
            batch.tokens.append(list(sample.tokens))
            batch.response_lengths.append(sample.response_length)
            batch.loss_masks.append(list(sample.loss_mask))
            batch.rewards.append(scalar_reward(sample, reward_key) if rewards is None else rewards[i])
            batch.group_ids.append(sample.group_index)
            batch.rollout_log_probs.append(list(sample.rollout_log_probs))
            if rollout_id_key:
                batch.rollout_ids.append(rollout_id(sample, rollout_id_key, len(batch.rollout_ids)))
            if top_p_replay:
                check_nuclei(sample)
                batch.top_p_token_ids.append(list(sample.rollout_top_p_token_ids))
                batch.top_p_token_offsets.append(list(sample.rollout_top_p_token_offsets))
            if routing_replay:
                check_routed_experts(sample)
                batch.routed_experts.append(sample.rollout_routed_experts)
        images = [image_data(sample).get("image_data") for sample in trainable(samples)]
        batch.images = images if any(images) else None
        videos = [video_data(sample).get("video_data") for sample in trainable(samples)]
        batch.videos = videos if any(videos) else None
        return batch

    def nuclei(self, indices: list[int]) -> tuple[list[list[int]], list[list[int]]] | None:
        """The nuclei ids and offsets of the samples ``indices`` (for a micro-batch), or None
        without top-p replay."""
        if self.top_p_token_offsets is None:
            return None
        return [self.top_p_token_ids[i] for i in indices], [self.top_p_token_offsets[i] for i in indices]

    def select(self, indices: list[int]) -> RolloutBatch:
        """The samples at ``indices``, in that order."""
        picked = {}
        for f in fields(self):
            column = getattr(self, f.name)
            picked[f.name] = None if column is None else [column[i] for i in indices]
        return RolloutBatch(**picked)

    def num_tokens(self, index: int) -> int:
        return len(self.tokens[index])


def trainable(samples: list[Sample]) -> list[Sample]:
    """The samples that go to training: all but the failed and aborted ones, in order."""
    return [sample for sample in samples if sample.status not in (SampleStatus.FAILED, SampleStatus.ABORTED)]


def carried_teacher_log_probs(samples: list[Sample]) -> list[list[float]] | None:
    """The teacher log-probs ``samples`` carry (on-policy distillation), one list per sample,
    or None when none does; a ValueError naming the first sample without them when only some do."""
    carried = [sample.teacher_log_probs is not None for sample in samples]
    if not any(carried):
        return None
    if not all(carried):
        missing = samples[carried.index(False)]
        raise ValueError(
            f"{sum(carried)} of the rollout's {len(samples)} samples carry teacher_log_probs (on-policy "
            f"distillation) and {missing.describe()} does not: the function that sets them (a reward "
            "post-process asking the teacher) must set them on every sample it returns"
        )
    return [[float(lp) for lp in sample.teacher_log_probs] for sample in samples]


def train_batch(samples: list[Sample], config: Config, plugins) -> RolloutBatch:
    """The train data of a rollout's samples (in prompt order): ``--train-data-converter``'s
    batch, or `RolloutBatch.from_samples`; with ``--reward-post-process``, the post-processor's
    rewards (trained on as they are) and raw rewards (logged) replace the scored ones."""
    samples = trainable(samples)
    processed = _post_processed(samples, config, plugins)
    converter = config.get("train_data_converter")
    if converter:
        batch = _converted(samples, config, plugins, converter)
        if processed and len(batch) != len(samples):
            raise ValueError(
                f"train-data converter '{converter}' made {len(batch)} entries of {len(samples)} samples, "
                f"so --reward-post-process's one reward per sample cannot be placed; drop "
                "--reward-post-process and post-process the rewards in the converter"
            )
    else:  # post-processed rewards given: a dict reward without --reward-key is the post-processor's to read
        batch = RolloutBatch.from_samples(
            samples,
            config.reward_key,
            top_p_replay=config.rollout_top_p < 1,
            rollout_id_key=config.rollout_id_key,
            rewards=processed[1] if processed else None,
            routing_replay=config.get("use_rollout_routing_replay"),
        )
    if processed:
        batch.raw_rewards, batch.rewards = processed
    check_teacher_log_probs(batch, config)
    return batch


def check_teacher_log_probs(batch: RolloutBatch, config: Config) -> None:
    """Teacher log-probs carried by the samples are on-policy distillation's teacher: a
    `RunError` when they would not be trained on (``--opd-kl-coef`` 0) or when
    ``--opd-teacher-load`` names a second teacher."""
    if batch.teacher_log_probs is None:
        return
    if config.get("opd_teacher_load"):
        raise RunError(
            f"the samples carry teacher_log_probs (on-policy distillation from a teacher engine) and "
            f"--opd-teacher-load {config.opd_teacher_load} names a teacher for the train ranks too: keep one, drop "
            "--opd-teacher-load to train on the samples' (or stop setting sample.teacher_log_probs)"
        )
    if not config.get("opd_kl_coef"):
        raise RunError(
            "the samples carry teacher_log_probs (on-policy distillation from a teacher engine) but --opd-kl-coef "
            "is 0, so they would not be trained on: set --opd-kl-coef C (slime's OPD launch uses 1.0)"
        )


def _post_processed(samples: list[Sample], config: Config, plugins) -> tuple[list[float], list[float]] | None:
    """``(raw_rewards, rewards)`` of ``--reward-post-process``, one per sample; None without it."""
    name = config.get("reward_post_process")
    if not name:
        return None
    what = f"reward post-processor '{name}'"
    returned = plugins.registry("reward_post_processors").get(name)(samples, config)
    try:
        raw, rewards = ([float(r) for r in part] for part in returned)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must return (raw_rewards, rewards), two lists of numbers ({exc})") from None
    if len(raw) != len(samples) or len(rewards) != len(samples):
        raise ValueError(
            f"{what} returned {len(raw)} raw rewards and {len(rewards)} rewards for {len(samples)} "
            "samples; it must return one of each per sample, in the order it got them"
        )
    for kind, values in (("raw reward", raw), ("reward", rewards)):
        bad = next((i for i, value in enumerate(values) if not math.isfinite(value)), None)
        if bad is not None:
            raise NonFiniteError(
                f"{what} returned the {kind} {values[bad]} for {samples[bad].describe()}, which cannot "
                "be trained on (or logged); it must return finite numbers"
            )
    return raw, rewards


def _converted(samples: list[Sample], config: Config, plugins, name: str) -> RolloutBatch:
    """The batch of ``--train-data-converter NAME``."""
    batch = plugins.registry("train_data_converters").get(name)(samples, config)
    if not isinstance(batch, RolloutBatch):
        raise TypeError(
            f"train-data converter '{name}' returned a {type(batch).__name__}; it must return a "
            "slime_core.rollout_batch.RolloutBatch"
        )
    return batch


def check_nuclei(sample: Sample) -> None:
    """ValueError unless every trained token of ``sample`` has its nucleus (top-p replay)."""
    offsets = sample.rollout_top_p_token_offsets
    missing = [
        t for t, mask in enumerate(sample.loss_mask) if mask and (offsets is None or offsets[t] == offsets[t + 1])
    ]
    if missing:
        raise ValueError(
            f"sample {sample.group_index}/{sample.index} has no top-p nucleus for {len(missing)} of its trained "
            "tokens, "
            "which --rollout-top-p < 1 trains over: the engine did not return them (SGLang needs slime's top-p patch) "
            "or a router or generate function dropped them; fix that, or use --rollout-top-p 1"
        )


def check_routed_experts(sample: Sample) -> None:
    """ValueError unless the engine's routing of ``sample`` reaches its last trained token (R3):
    the token at position p is scored by the forward at p - 1, which needs row p - 1."""
    trained = [t for t, mask in enumerate(sample.loss_mask) if mask]
    rows = len(sample.rollout_routed_experts or [])
    needed = sample.prompt_length + trained[-1] if trained else 0
    if rows < needed:
        raise ValueError(
            f"{sample.describe()} has the routed experts of {rows} tokens, but its trained tokens need {needed}, "
            "which --use-rollout-routing-replay replays: the engine did not return them (SGLang: "
            "--sglang-enable-return-routed-experts) or a generate function dropped them; fix that, or drop the flag"
        )


def rollout_id(sample: Sample, key: str, position: int) -> tuple:
    """The rollout ``sample`` comes from (``--rollout-id-key KEY``, slime's ``Sample.rollout_id``):
    samples of one prompt group whose ``metadata[KEY]`` are equal come from one rollout; a
    sample without the key is a rollout of its own (``position``: its index in the batch)."""
    if key in sample.metadata:
        return sample.group_index, "rollout", sample.metadata[key]
    return sample.group_index, "sample", position


def split_by_dp_rank(batch: RolloutBatch, dp_size: int) -> list[RolloutBatch]:
    """One share per data-parallel rank (see `dp_rank_indices`)."""
    return [batch.select(indices) for indices in dp_rank_indices(batch, dp_size)]


def groups_per_rank_problem(groups: int, ranks: int) -> str | None:
    """Every data-parallel rank (model replica) gets whole prompt groups, at least one
    (`dp_rank_indices`): said by the config checks for ``--rollout-batch-size`` groups, and when
    a rollout has fewer."""
    if groups >= ranks:
        return None
    return (
        f"{groups} prompt groups cannot feed {ranks} data-parallel ranks (a group stays on one rank); "
        "raise --rollout-batch-size, or use fewer data-parallel ranks (fewer training ranks, or more of "
        "them per model replica: tensor, pipeline or context parallelism)"
    )


def dp_rank_indices(batch: RolloutBatch, dp_size: int) -> list[list[int]]:
    """The sample indices of each data-parallel rank: whole groups, balanced by token count.

    Groups go, largest first, to the rank with the fewest tokens so far (the greedy LPT
    rule: within 4/3 of the best balance). Every rank needs at least one group.
    """
    groups: dict[int, list[int]] = {}
    for i, group_id in enumerate(batch.group_ids):
        groups.setdefault(group_id, []).append(i)
    problem = groups_per_rank_problem(len(groups), dp_size)
    if problem:
        raise ValueError(problem)
    loads, shares = [0] * dp_size, [[] for _ in range(dp_size)]
    by_size = sorted(groups.values(), key=lambda idx: -sum(batch.num_tokens(i) for i in idx))
    for indices in by_size:
        rank = loads.index(min(loads))
        shares[rank].extend(indices)
        loads[rank] += sum(batch.num_tokens(i) for i in indices)
    return [sorted(share) for share in shares]
