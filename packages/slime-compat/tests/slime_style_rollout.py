"""Rollout-side functions in THUDM slime's style (its signatures and fields), named by dotted
path in test_rollout_hooks.py as a launch script would. ``SEEN`` records what each got."""

import copy

from slime.rollout.filter_hub.base_types import DynamicFilterOutput
from slime.utils.types import Sample

SEEN: dict[str, list] = {}


async def twin_generate(args, sample: Sample, sampling_params, evaluation=False) -> list[Sample]:
    """Answer "7" in one model token, then split the trajectory in two training samples (as
    slime's multi-agent example returns one sample per agent)."""
    sample.append_response_tokens(
        args,
        tokens=[55],
        log_probs=[-0.5],
        text="7",
        meta_info={"finish_reason": {"type": "stop"}, "weight_version": "0"},
    )
    twin = copy.deepcopy(sample)
    twin.metadata["twin"] = True
    return [sample, twin]


def mark_hook(args, sample: Sample, rollout_id=None):
    """A sample hook that names only ``rollout_id`` (slime passes it the keywords it names)."""
    sample.metadata["hooked_in"] = rollout_id


async def count_hook(args, sample: Sample, **kwargs) -> Sample:
    """A second, async hook: sees the first one's work and every keyword."""
    SEEN.setdefault("hook_kwargs", []).append((sample.metadata.get("hooked_in"), sorted(kwargs)))
    return sample


async def hooked_twin_reward(args, sample: Sample, **kwargs) -> float:
    """1 for a twin the hooks ran on before the reward, else 0."""
    return 1.0 if sample.metadata.get("twin") and "hooked_in" in sample.metadata else 0.0


def drop_odd_prompts(args, samples, **kwargs) -> DynamicFilterOutput:
    """Keep the groups of even prompts ("0+1=", "2+1=", ...)."""
    return DynamicFilterOutput(keep=int(samples[0].prompt.split("+")[0]) % 2 == 0, reason="odd")


def remove_originals(args, groups: list[list[Sample]]) -> None:
    """slime's rollout sample filter: train on the twins only."""
    SEEN.setdefault("filter", []).append([len(group) for group in groups])
    for group in groups:
        for sample in group:
            sample.remove_sample = not sample.metadata.get("twin")


def record_all(args, all_groups: list[list[Sample]], data_source) -> None:
    """slime's all-samples process: sees every group generated, filtered-out ones too."""
    SEEN.setdefault("all", []).append([group[0].prompt for group in all_groups])
    args.processed_group_count = len(all_groups)
