"""A real SGLang server on a GPU, driven by the same group and client as the CPU engine.

Needs CUDA (the ``gpu`` marker) and the ``sglang`` package (``slime-sglang[server]``, which
``scripts/setup-dev.sh`` installs on GPU machines). Not yet run: the GPU machines this
project had could not install SGLang (no network there, and its kernels are too large to
carry).
"""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from slime_core.engine import SamplingParams
from slime_core.testing import make_config
from slime_core.tools.tiny_models import build_tiny_qwen3
from slime_sglang.client import EngineClient
from slime_sglang.engine_group import EngineGroup

pytestmark = [pytest.mark.gpu, pytest.mark.integration]


@pytest.fixture(scope="module")
def sglang_models(tmp_path_factory):
    if importlib.util.find_spec("sglang") is None:
        pytest.fail("the gpu tests of slime-sglang need SGLang: pip install 'slime-sglang[server]'")
    root = tmp_path_factory.mktemp("sglang-models")
    return (
        build_tiny_qwen3(root / "a", hidden_size=256, num_layers=2, seed=0),
        build_tiny_qwen3(root / "b", hidden_size=256, num_layers=2, seed=1),
    )


def test_sglang_generates_with_log_probs_and_loads_new_weights(ray_cluster, sglang_models, tmp_path):
    first, second = sglang_models
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    config = make_config(data, first, rollout_batch_size=1, rollout_engine="sglang")
    config.sglang.update({"mem_fraction_static": 0.3})
    group = EngineGroup.start(config, str(first))
    try:

        async def exercise():
            client = EngineClient(group.urls[0])
            sampling = SamplingParams(max_new_tokens=8, temperature=1.0, sampling_seed=0)
            try:
                before = await client.generate([5, 6, 7], sampling, return_logprob=True)
                await group.pause()
                await group.update_weights_from_disk(str(second), "1")
                await group.resume_generation()
                after = await client.generate([5, 6, 7], sampling, return_logprob=True)
                return before, after, await group.weight_versions()
            finally:
                await client.close()

        before, after, versions = asyncio.run(exercise())
    finally:
        group.shutdown()
    assert len(before.output_ids) == len(before.log_probs) > 0
    assert all(lp <= 0.0 for lp in before.log_probs)
    assert versions == ["1"] and after.log_probs != before.log_probs
