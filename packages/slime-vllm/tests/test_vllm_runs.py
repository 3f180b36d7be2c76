"""Whole `slime run`s on the session's two vLLM servers (the root conftest's
``vllm_server_pair``), which they share instead of starting their own: these test what a run
does with vLLM, not its start-up (``tests/test_vllm_loop.py``'s fault run starts its own, and
replaces one).

The run reaches the servers through rollout backend ``vllm-shared`` (the root conftest's
`SharedVLLMServers`): vLLM's own engines and client (`slime_vllm.engines.VLLMEngines`,
`slime_vllm.client.VLLMClient`), started once. Engines a run did not start may hold any
weights, so the run pushes its trainer's weights before the first rollout
(``slime_core.loop.parts._engines_may_hold_other_weights``), as it does for external engines;
the test puts the servers' own weights back after.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slime_core.cli.run import run_command
from slime_core.loop.run_dir import read_metrics
from slime_core.plugins import Plugins
from slime_core.testing import RolloutSamples

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLE = Path(__file__).parents[3] / "examples" / "tool_use"
#: Bytes per bucket of a tensor update: below one MLP matrix of the hidden-128 model (192 KiB), so
#: the buckets split every layer (q_proj in one, k_proj in the next, ...): vLLM's layer-wise
#: reload then gets a layer in parts.
SMALL_BUCKET = 100_000


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory):
    """The hidden-128 tiny Qwen3 (the shared server's architecture) warmed up to call the
    calculator (`examples.tool_use.warmup`), so that RL samples hold tool calls."""
    import torch

    from examples.tool_use.warmup import warm_up
    from slime_core.tools.tiny_models import build_tiny_qwen3

    records = [json.loads(line) for line in (EXAMPLE / "data" / "multiply_train.jsonl").read_text().splitlines()]
    model_dir = build_tiny_qwen3(tmp_path_factory.mktemp("tool-qwen3-128"), hidden_size=128)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        warm_up(model_dir, records, steps=150)
    finally:
        torch.set_num_threads(threads)
    return model_dir


def _tool_run(shared, model_dir, out: Path, *flags) -> tuple[list[dict], list]:
    """`slime run` of the calculator example on the shared servers ``shared`` hands it (``--router
    none``: the rollout spreads its requests over them); its metrics and samples."""
    recorder = RolloutSamples()
    plugins = Plugins()
    extra = {"vllm_shared_server": shared, "vllm_run_recorder": recorder}
    for name, obj in extra.items():
        plugins.register_object(name, obj)
    argv = [
        str(EXAMPLE / "calculator.yaml"),
        *("--rollout-backend", "vllm-shared", "--router", "none", "--rollout-num-gpus", str(len(shared.view.urls))),
        *("--hf-checkpoint", str(model_dir)),
        *("--prompt-data", str(EXAMPLE / "data" / "multiply_train.jsonl")),
        *("--num-rollout", "2", "--rollout-batch-size", "4", "--n-samples-per-prompt", "4"),
        *("--global-batch-size", "16", "--use-dynamic-batch-size", "--max-tokens-per-gpu", "4096"),
        *("--check-weight-update-equal", "--output-dir", str(out), *flags),
    ]
    try:
        assert run_command(argv, plugins) == 0
    finally:
        for name in extra:
            plugins.unregister(name)
    return read_metrics(out / "metrics.jsonl"), recorder.samples


def _drawn(samples) -> list[tuple]:
    """What each sample drew, in a fixed order: its tokens, loss mask, reward and status."""
    key = [(s.group_index, s.index, s.tokens, s.loss_mask, s.reward, str(s.status)) for s in samples]
    return sorted(key, key=lambda entry: entry[:2])


def test_seeded_reruns_of_a_tool_calling_run_are_identical_across_weight_transports(
    vllm_shared_backend, vllm_model_dir, tool_model, tmp_path
):
    """Two runs with the same seed, one updating vLLM's weights by many small tensor buckets
    (each holding part of a layer), the other from disk, both checked by
    ``--check-weight-update-equal``: multi-turn tool calls through the default rollout on vLLM
    (the model's calls stopped by the ``</calc>`` stop string, the tool's answer in the sample
    with loss mask 0), and the same tokens, rewards and losses in both runs, rollout after
    rollout: the second rollout is drawn on weights each transport delivered. The first run has
    one engine, the second two (``--router none``: the rollout spreads the requests over them
    itself): a seeded rollout draws the same on any number of engines."""
    one, two = vllm_shared_backend(1), vllm_shared_backend(2)
    try:
        by_buckets, samples = _tool_run(
            one,
            tool_model,
            tmp_path / "buckets",
            *("--update-weight-transport", "tensor", "--update-weight-buffer-size", str(SMALL_BUCKET)),
        )
        served = _served(two.pair)
        from_disk, samples_again = _tool_run(two, tool_model, tmp_path / "disk", "--update-weight-transport", "disk")
        served = [now - was for now, was in zip(_served(two.pair), served)]
    finally:
        two.restore(vllm_model_dir)  # both servers
    for records in (by_buckets, from_disk):
        assert [r["rollout_id"] for r in records] == [0, 1] and records[-1]["weight_version"] == 2
        assert all(r["weight_update/max_logprob_diff"] < 1e-3 for r in records)
    with_tools = [s for s in samples if s.metadata.get("tool_calls")]
    assert len(with_tools) >= len(samples) // 2, [s.response for s in samples]
    for sample in with_tools:  # the model's call (mask 1), the tool's answer (mask 0), ...
        assert sample.loss_mask[0] == 1 and 0 in sample.loss_mask and "<result>" in sample.response
    for key in ("rollout/reward_mean", "rollout/response_length_mean", "train/loss", "train/grad_norm"):
        assert [r.get(key) for r in by_buckets] == [r.get(key) for r in from_disk], key
    assert _drawn(samples) == _drawn(samples_again)
    assert min(served) > 4, served  # the second run's rollouts went to both engines


def _served(pair) -> list[int]:
    """``POST /generate`` answered so far by each of the pair's servers (their access logs)."""
    return [(pair.log_dir / "engines" / f"engine_{i}.log").read_text().count("POST /generate") for i in range(2)]
