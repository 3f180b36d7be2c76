"""The ``sft`` rollout function: supervised fine-tuning through the same loop.

Instead of generating, each sample's response is its label followed by the tokenizer's
end-of-text token, trained on with ``--loss-type sft_loss``. No engine is started for it
(`slime_core.rollout.parts.without_engines`), and no weights are pushed. Use it for a warm-up before RL::

    slime run examples/quickstart/sft_warmup.yaml
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_core.rollout.parts import without_engines
from slime_core.rollout.result import RolloutResult
from slime_core.sample import Sample, SampleStatus

if TYPE_CHECKING:
    from slime_core.config.config import Config


@without_engines
async def sft_rollout(rollout_id: int, config: Config, parts):
    """``--rollout-batch-size`` groups from the data source, each sample completed with its label."""
    groups = parts.data_source.get_samples(config.rollout_batch_size)
    tokenizer = parts.ctx.tokenizer
    for sample in (sample for group in groups for sample in group):
        complete_with_label(sample, tokenizer)
    return RolloutResult(groups, {})


def complete_with_label(sample: Sample, tokenizer) -> None:
    """Prompt tokens, then the label and end-of-text as the trainable response."""
    if sample.label is None:
        raise ValueError(
            f"SFT needs a label for every prompt; sample {sample.group_index} has none: "
            "set --label-key to the record key holding the target text"
        )
    # the data source's tokens where it made them (a prompt with images: the processor's, images expanded)
    prompt = list(sample.tokens) or list(tokenizer.encode(sample.prompt, add_special_tokens=False))
    response = list(tokenizer.encode(str(sample.label), add_special_tokens=False)) + [tokenizer.eos_token_id]
    sample.tokens = prompt
    sample.append_response(response, log_probs=[0.0] * len(response), text=str(sample.label))
    sample.reward = 0.0
    sample.status = SampleStatus.COMPLETED
