"""Rollout and training agree: on the same weights, the CPU engine's log-probs of the tokens it
sampled equal the FSDP backend's recomputation (the `train_rollout_logprob_abs_diff` the loop
reports), at a temperature other than 1."""

import asyncio
import json

import pytest

from slime_core.data.source import PromptDataSource
from slime_core.plugins import Plugins
from slime_core.rollout.default import default_rollout
from slime_core.rollout.generate import generate_sample
from slime_core.rollout.parts import GenerateContext, RolloutParts
from slime_core.rollout.reward_hub import RewardHub
from slime_core.rollout_batch import RolloutBatch
from slime_core.testing import make_config
from slime_core.train_backend import TrainGroup
from slime_fsdp.rank import FSDPTrainRank
from slime_sglang.client import EngineClient
from slime_sglang.cpu_engine.launch import cpu_engine

pytestmark = pytest.mark.integration


def test_engine_and_trainer_log_probs_agree(ray_cluster, tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{a}=", "label": "0"}) + "\n" for a in range(8)))
    config = make_config(
        data,
        tiny_model_dir,
        rollout_batch_size=4,
        n_samples_per_prompt=2,
        rollout_max_response_len=16,
        rollout_temperature=0.8,
        rm_type="f1",
        use_dynamic_batch_size=True,
        max_tokens_per_gpu=256,
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    trainer = TrainGroup(FSDPTrainRank, config, 1)  # its process starts while the engine does
    try:
        with cpu_engine(tiny_model_dir, log_path=tmp_path / "engine.log") as url:
            parts = RolloutParts(
                PromptDataSource.from_config(config, tokenizer),
                RewardHub(config, Plugins()),
                generate_sample,
                None,
                GenerateContext(EngineClient(url), tokenizer, config),
            )
            result = asyncio.run(default_rollout(0, config, parts))
        batch = RolloutBatch.from_samples([s for group in result.groups for s in group])
        trainer.init()
        recomputed = trainer.compute_log_probs(batch)
    finally:
        trainer.shutdown()
    diffs = [abs(a - b) for rollout, train in zip(batch.rollout_log_probs, recomputed) for a, b in zip(rollout, train)]
    assert len(diffs) == sum(batch.response_lengths) > 8
    assert max(diffs) < 1e-4
