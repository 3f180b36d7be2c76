"""Functions and a data source written in THUDM slime's style, using the slime modules
slime-compat adds (``slime.rollout.sglang_rollout.generate_rollout``,
``slime.rollout.data_source``), named by dotted path in the tests. ``SEEN`` records what they saw."""

import json
from pathlib import Path

from slime.rollout.base_types import RolloutFnTrainOutput
from slime.rollout.data_source import RolloutDataSourceWithBuffer
from slime.rollout.sglang_rollout import generate_rollout
from slime.utils.types import Sample

SEEN: dict[str, list] = {}


def _seen(name, *values):
    SEEN.setdefault(name, []).append(values)


async def bare_generate(args, sample: Sample, sampling_params, evaluation=False) -> Sample:
    """Set tokens, response and log-probs directly, as slime's examples do, and no loss mask
    (two response tokens; "7" for an even ``sample.index``, "x" for an odd one)."""
    _seen("generate", sample.group_index, sample.index)
    sample.tokens = [5, 6, 55, 56]
    sample.response = "x" if sample.index % 2 else "7"
    sample.response_length = 2
    sample.rollout_log_probs = [-0.5, -0.5]
    if sample.index == 1:
        sample.loss_mask = None  # slime's default, said explicitly
    sample.status = Sample.Status.COMPLETED
    return sample


def wrapped_rollout(args, rollout_id, data_source, evaluation=False):
    """slime's default rollout, then every reward raised by 10 (a sync function, as slime's are)."""
    output = generate_rollout(args, rollout_id, data_source, evaluation)
    if evaluation:
        _seen("eval", {name: result["rewards"] for name, result in output.data.items()})
        return output
    for group in output.samples:
        for sample in group:
            sample.reward += 10
    _seen("rollout", rollout_id, type(output).__name__)
    return RolloutFnTrainOutput(samples=output.samples, metrics={"rollout/wrapped": 1.0})


class RecordingSource(RolloutDataSourceWithBuffer):
    """slime's buffered source, recording what it hands out and its save / load calls."""

    def get_samples(self, num_samples):
        groups = super().get_samples(num_samples)
        _seen("prompts", [(group[0].prompt, [sample.index for sample in group]) for group in groups])
        return groups

    def save(self, rollout_id):
        _seen("save", rollout_id)
        super().save(rollout_id)

    def load(self, rollout_id=None):
        _seen("load", rollout_id)
        super().load(rollout_id)


class CounterSource:
    """A source of its own, keeping its counter in a file under args.save, as slime's user sources do."""

    def __init__(self, args):
        self.args, self.next = args, 0

    def get_samples(self, num_samples):
        n = self.args.n_samples_per_prompt
        groups = [
            [Sample(group_index=g, index=g * n + i, prompt=f"{g}+1=", label=str(g + 1)) for i in range(n)]
            for g in range(self.next, self.next + num_samples)
        ]
        self.next += num_samples
        _seen("counter_prompts", [group[0].prompt for group in groups])
        return groups

    def add_samples(self, samples):
        raise RuntimeError("read-only")

    def save(self, rollout_id):
        _seen("counter_save", rollout_id, self.next)
        Path(self.args.save, f"counter_{rollout_id}.json").write_text(json.dumps(self.next))

    def load(self, rollout_id=None):
        _seen("counter_load", rollout_id)
        self.next = json.loads(Path(self.args.load, f"counter_{rollout_id}.json").read_text())
