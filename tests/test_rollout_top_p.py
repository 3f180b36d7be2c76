"""Top-p replay end to end: with ``--rollout-top-p`` < 1 the CPU engine returns the nucleus of
every token it samples, the sample carries it to the trainer, and the trainer scores each token
over that nucleus, so its log-probs equal the engine's (``train_rollout_logprob_abs_diff`` is
float noise); over the whole vocabulary they would differ by -log(nucleus mass) per token.
The reference log-probs use the nuclei too: at rollout 0 the KL to the reference is 0."""

import pytest
import torch

from slime_core.algorithms import log_probs_from_logits
from slime_core.testing import RolloutSamples

pytestmark = pytest.mark.integration

#: One rollout of 4 prompts x 4 samples, with a reference model (KL loss). sglang-router drops
#: the request's custom_params (see the last test), so the engines are used in turn.
FLAGS = (
    "--num-rollout",
    "1",
    "--rollout-top-p",
    "0.9",
    "--rollout-batch-size",
    "4",
    "--n-samples-per-prompt",
    "4",
    "--use-kl-loss",
    "--kl-loss-coef",
    "0.1",
    "--router",
    "none",
)


def whole_vocabulary_gap(model_dir, samples) -> float:
    """Mean |engine log-prob − whole-vocabulary log-prob| of the samples' trained tokens
    under the starting weights: the gap the trainer would show without the nuclei."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    gaps = []
    with torch.no_grad():
        for sample in samples:
            logits = model(torch.tensor([sample.tokens])).logits[0, sample.prompt_length - 1 : -1]
            whole = log_probs_from_logits(logits, torch.tensor(sample.tokens[sample.prompt_length :]))
            gaps += (torch.tensor(sample.rollout_log_probs) - whole).abs()[torch.tensor(sample.loss_mask) == 1].tolist()
    return sum(gaps) / len(gaps)


def test_the_fsdp_trainer_scores_tokens_over_the_engine_s_nuclei(slime_run, tiny_model_dir):
    """One FSDP rank. (Megatron masks each tensor-parallel slice: slime-megatron's vocabulary-parallel
    test checks that; a Megatron run would take about a minute more.)"""
    kept = RolloutSamples()
    train = slime_run(*FLAGS, hooks=[kept])[0]
    samples = kept.samples
    assert len(samples) == 16 and all(s.rollout_top_p_token_offsets is not None for s in samples)
    nucleus_sizes = [
        b - a for s in samples for a, b in zip(s.rollout_top_p_token_offsets, s.rollout_top_p_token_offsets[1:])
    ]
    assert min(nucleus_sizes) >= 1 and max(nucleus_sizes) < 100  # the tiny model's vocabulary: 100 tokens
    assert train["train/train_rollout_logprob_abs_diff"] < 1e-4
    assert abs(train["train/kl_loss"]) < 1e-6
    assert whole_vocabulary_gap(tiny_model_dir, samples) > 0.02


def test_a_router_that_drops_the_request_for_nuclei_is_a_config_error(tmp_path, tiny_model_dir):
    from slime_core.config import ConfigError
    from slime_core.testing import make_config

    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    with pytest.raises(ConfigError, match="which this sglang-router drops; use --router none"):
        make_config(data, tiny_model_dir, rollout_batch_size=1, rollout_top_p=0.9)
    with pytest.raises(ConfigError, match=r"--rollout-top-p must be in \(0, 1\]"):
        make_config(data, tiny_model_dir, rollout_batch_size=1, rollout_top_p=1.5)
