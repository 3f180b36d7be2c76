"""`slime run` with LoRA (``--lora-rank``) on CPU: GRPO trains the adapter alone and each weight sync
pushes it to the CPU engines, which merge it into their base."""

import json

import pytest

from slime_core.loop.run_dir import read_metrics

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_grpo_with_lora_raises_the_greedy_eval_and_the_engines_merge_the_pushed_adapter(
    slime_run, tmp_path, tiny_model_dir
):
    """``--lora-rank``: each sync pushes the adapter alone (its bytes, not the model's) and the CPU
    engine merges it into its base, so its log-probs equal the trainer's after every push; the
    greedy eval reward rises (0.0 -> 1.0 here). The adapter alone trains, so the sampled reward
    moves more slowly than with full fine-tuning; test_fsdp_backend.py's LoRA test checks that
    GRPO raises a rewarded token's probability."""
    from torch import nn
    from transformers import AutoModelForCausalLM

    eval_data = tmp_path / "eval.jsonl"
    eval_data.write_text("".join(json.dumps({"prompt": f"{a}+2=", "label": str(a + 2)}) + "\n" for a in range(8)))
    records = slime_run(
        *("--num-rollout", "6", "--lora-rank", "8", "--lora-alpha", "16", "--lr", "2e-2"),
        *("--check-weight-update-equal", "--eval-prompt-data", "small", str(eval_data), "--eval-interval", "6"),
        *("--eval-temperature", "0"),
    )
    assert all(r["weight_update/max_logprob_diff"] < 1e-3 for r in records)
    before = read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    curve = [before["eval/small/reward_mean"], records[-1]["eval/small/reward_mean"]]
    assert curve[1] > curve[0], curve
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    linears = [m for name, m in model.named_modules() if isinstance(m, nn.Linear) and name != "lm_head"]
    adapter = sum(8 * (m.in_features + m.out_features) * 4 + 8 for m in linears)  # float32 A and B, float64 scaling
    merged = sum(p.numel() * 4 for p in model.parameters())
    sent = {r["weight_update/bytes"] for r in records}
    assert len(sent) == 1 and adapter < sent.pop() < 1.1 * adapter < merged / 4, (sent, adapter, merged)
    assert "LoRA: weight syncs (tensor) send the adapter alone" in (tmp_path / "run" / "slime.log").read_text()
