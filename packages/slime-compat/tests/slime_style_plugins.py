"""Functions written in THUDM slime's style (its signatures, imports and return types), which
the tests name by dotted path as a slime launch script would. ``CALLS`` records what each saw."""

from slime.rollout.base_types import RolloutFnEvalOutput, RolloutFnTrainOutput
from slime.rollout.filter_hub.base_types import DynamicFilterOutput
from slime.utils.types import Sample

CALLS: dict[str, list] = {}


def _record(name, *seen):
    CALLS.setdefault(name, []).append(seen)


async def digit_reward(args, sample: Sample, **kwargs) -> float:
    """1 per digit in the response, over its length; counts its calls on ``args``."""
    args.rm_calls = getattr(args, "rm_calls", 0) + 1
    _record("rm", type(sample), sample.status, args.rollout_batch_size)
    return sum(ch.isdigit() for ch in sample.response) / max(len(sample.response), 1)


async def group_reward(args, samples: list[Sample], **kwargs) -> list[float]:
    """Rank within the group: 0, 1, 2, ... (one call per group)."""
    _record("group_rm", len(samples))
    return [float(i) for i in range(len(samples))]


def per_sample_reward(args, sample, **kwargs):
    return 0.25


async def digits_generate(args, sample: Sample, sampling_params, evaluation=False) -> Sample:
    """Answer "7" (even sample index) or "x" (odd) in one model token, as an SGLang call would,
    without a server."""
    _record("generate", args.sglang_router_ip, sampling_params["max_new_tokens"], evaluation)
    token = 55  # any id of the tiny character vocabulary
    sample.append_response_tokens(
        args,
        tokens=[token],
        log_probs=[-0.5],
        text="x" if sample.index % 2 else "7",
        meta_info={"finish_reason": {"type": "stop"}, "weight_version": "0"},
    )
    return sample


def keep_mixed(args, samples: list[Sample], **kwargs) -> DynamicFilterOutput:
    """Keep a group unless its rewards are all equal (slime's nonzero-std rule)."""
    rewards = {sample.get_reward_value(args) for sample in samples}
    _record("filter", len(samples))
    return DynamicFilterOutput(keep=len(rewards) > 1, reason="zero_std")


def drop_all_but_scarce(args, samples, **kwargs) -> DynamicFilterOutput:
    return DynamicFilterOutput(keep=False, reason="never", keep_when_insufficient=True)


def legacy_bool_filter(args, samples, **kwargs) -> bool:
    return False


def labels_rollout(args, rollout_id, data_source, evaluation=False):
    """A whole rollout without an engine: each sample answers its label (slime's train output)."""
    groups = data_source.get_samples(args.rollout_batch_size)
    for group in groups:
        for sample in group:
            sample.append_response_tokens(args, tokens=[1], log_probs=[0.0], text=str(sample.label))
            sample.status = Sample.Status.COMPLETED
            sample.reward = 1.0
    return RolloutFnTrainOutput(samples=groups, metrics={"rollout/custom": rollout_id})


def legacy_rollout(args, rollout_id, data_source, evaluation=False):
    """The legacy form: bare groups."""
    return labels_rollout(args, rollout_id, data_source).samples


def flat_rollout(args, rollout_id, data_source, evaluation=False):
    """Flat samples, regrouped by group_index."""
    return [sample for group in labels_rollout(args, rollout_id, data_source).samples for sample in group]


async def eval_rollout(args, rollout_id, data_source, evaluation=False):
    _record("eval", rollout_id, evaluation)
    return RolloutFnEvalOutput(
        data={"toy": {"rewards": [1.0, 0.0], "truncated": [False, True], "samples": []}}, metrics={"eval/extra": 3}
    )


def legacy_eval(args, rollout_id, data_source, evaluation=False):
    return {"toy": {"rewards": [0.5, 0.5]}}


def newest_first(args, rollout_id, buffer, num_samples):
    """Pop the newest groups (slime's buffer filters pop from the list they get)."""
    chosen = buffer[-num_samples:]
    del buffer[-num_samples:]
    return chosen


class CountingSource:
    """A slime data source: prompts "q0", "q1", ... in groups of args.n_samples_per_prompt."""

    def __init__(self, args):
        self.args, self.next, self.returned = args, 0, []

    def get_samples(self, num_samples):
        groups = []
        for _ in range(num_samples):
            groups.append(
                [
                    Sample(group_index=self.next, index=i, prompt=f"q{self.next}", label="1")
                    for i in range(self.args.n_samples_per_prompt)
                ]
            )
            self.next += 1
        return groups

    def add_samples(self, samples):
        self.returned.extend(samples)
