"""MoE routing replay through `slime run` (`slime_core.routing_replay`), on a tiny Qwen3-MoE whose
routers are near ties: the FSDP trainer computes in bf16 and the CPU engine in float32, so the
trainer would send some tokens to other experts than the engine did, as precision decides real
runs' near ties.

- R3 (``--use-rollout-routing-replay``): the engine returns every token's routed experts (equal,
  token by token and layer by layer, to a float32 forward of the model), the trainer replays them,
  and its log-probs are closer to the engine's than the same run's without R3.
- R2 (``--use-routing-replay``): two optimizer steps per rollout at a high learning rate move the
  routers between the π_old pass and the second update, which still routes as π_old did.

Both on the FSDP backend, and on the Megatron backend (megatron-core's router replay), whose R3 run
splits every layer over two tensor-parallel ranks with sequence parallelism: each rank's routers
see half of the tokens, which the replay must give them in their order; its R2 run splits every
sequence over two context-parallel ranks, whose recordings of their chunks are merged. (R3 on
pipeline and context parallelism: the moe-tp2-pp2-sp and moe-tp2-cp2-sp lines of
tests/test_parallel_layouts.py.)
"""

import pytest
import torch

from slime_core.moe_routers import RouterTaps
from slime_core.testing import RolloutSamples
from slime_core.tools.tiny_models import build_tiny_model, tie_moe_routers


def near_tied_moe(path):
    """A tiny Qwen3-MoE (hidden 64, 2 layers, 4 experts, top 2) whose experts' router weights are
    one shared row plus 2% of their own, so their scores nearly tie."""
    build_tiny_model(path, "qwen3_moe", hidden_size=64)
    return tie_moe_routers(path)


def float32_routing(path, samples) -> list[torch.Tensor]:
    """Per sample, the experts a float32 forward of the model at ``path`` routes its tokens to
    ((len(tokens) - 1, num_layers, top_k), each top-k sorted)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    taps, out = RouterTaps(model), []
    with torch.no_grad():
        for sample in samples:
            with taps.recording() as recorded:
                model(torch.tensor([sample.tokens]))
            out.append(taps.rows(recorded)[:-1].sort(-1).values)
    return out


#: The Megatron backend's R3 run: two tensor-parallel ranks with sequence parallelism.
MEGATRON_TP2_SP = ["--actor-num-gpus-per-node", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel"]
#: The Megatron backend's R2 run: two context-parallel ranks, whose recordings are merged.
MEGATRON_CP2 = ["--actor-num-gpus-per-node", "2", "--context-parallel-size", "2"]


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend", "r3_layout", "r2_layout"),
    [("fsdp", [], []), ("megatron", MEGATRON_TP2_SP, MEGATRON_CP2)],
    ids=["fsdp", "megatron-tp2-sp-cp2"],
)
def test_routing_replay_r3_matches_the_engine_and_r2_holds_pi_old_routing(
    slime_run, tmp_path, backend, r3_layout, r2_layout
):
    model = near_tied_moe(tmp_path / "model")
    flags = ["--hf-checkpoint", str(model), "--num-rollout", "1", "--rollout-batch-size", "2"]
    flags += ["--n-samples-per-prompt", "4", "--rollout-max-response-len", "6", "--bf16", "--router", "none"]
    flags += ["--num-steps-per-rollout", "2", "--lr", "0.05", "--train-backend", backend]
    kept = RolloutSamples()
    r3 = slime_run(*flags, *r3_layout, "--use-rollout-routing-replay", hooks=[kept], output="r3")[0]
    r2 = slime_run(*flags, *r2_layout, "--use-routing-replay", output="r2")[0]

    engine = [
        torch.tensor(s.rollout_routed_experts).view(len(s.tokens) - 1, 2, 2).sort(-1).values for s in kept.samples
    ]
    assert len(engine) == 8 and all(torch.equal(e, f) for e, f in zip(engine, float32_routing(model, kept.samples)))
    # the bf16 trainer would route some tokens elsewhere; R3 routes them as the engine did ...
    assert r3["train/routing_replay_logprob_mismatch"] > 0.02
    # ... so its log-probs are closer to the engine's than without R3 (the same samples: same seed)
    assert r3["train/train_rollout_logprob_abs_diff"] < 0.8 * r2["train/train_rollout_logprob_abs_diff"]
    # R2: the moved routers would now pick other experts; the update replays π_old's (R3 replays too)
    assert r2["train/routing_replay_update_mismatch"] > 0.02 and r3["train/routing_replay_update_mismatch"] > 0.02
    assert "train/routing_replay_logprob_mismatch" not in r2  # R2 records its own routing in the π_old pass


@pytest.mark.parametrize(
    ("model", "flags", "reason"),
    [
        ("dense", {"use_routing_replay": True}, "--use-routing-replay replays the routing of MoE layers, but"),
        ("moe", {"use_rollout_routing_replay": True, "router": "sglang"}, "which this sglang-router drops"),
        ("moe", {"use_rollout_routing_replay": True, "router": "none", "rollout_backend": "vllm"}, "vLLM servers"),
        (
            "moe",
            {"use_routing_replay": True, "train_backend": "megatron", "recompute_granularity": "full"},
            "backward runs the routers again",
        ),
    ],
)
def test_routing_replay_is_refused_where_it_cannot_apply(tmp_path, tiny_model_dir, model, flags, reason):
    from slime_core.config import ConfigError
    from slime_core.testing import make_config

    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    path = tiny_model_dir if model == "dense" else build_tiny_model(tmp_path / "moe", "qwen3_moe", hidden_size=64)
    with pytest.raises(ConfigError, match=reason):
        make_config(data, path, rollout_batch_size=1, **flags)
