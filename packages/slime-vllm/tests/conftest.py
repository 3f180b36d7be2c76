"""Fixtures of the vLLM tests: a tiny Qwen3 that vLLM's CPU attention serves (head size 32),
and one vLLM server for the session, started as a run starts it (a Ray actor, the run's token).

The tests skip only where there is no vLLM to run (no ``import vllm`` here and no
``.venv-vllm``; ``scripts/setup-dev.sh`` makes it, in CI too). Tests that change the shared
server's state (weights, pause) put it back in ``finally``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slime_vllm.servers import find_vllm_python

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    """Skip this folder's tests on a vLLM server where there is no vLLM to run (see the module docstring)."""
    if find_vllm_python() is not None:
        return
    skip = pytest.mark.skip(reason="no vLLM here and no .venv-vllm (bash scripts/setup-dev.sh makes it)")
    for item in items:
        if HERE in Path(item.fspath).parents and "vllm_engines" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory):
    """The tiny random Qwen3 with hidden size 128 (4 heads of 32, tied embeddings): the suite's
    hidden-64 model has heads of 16, which vLLM's CPU attention does not take."""
    from slime_core.tools.tiny_models import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3-128"), hidden_size=128)


@pytest.fixture(scope="session")
def prompt_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("vllm-data") / "prompts.jsonl"
    path.write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}=", "label": str(a + b)}) + "\n" for a in range(10) for b in range(10))
    )
    return path


@pytest.fixture(scope="session")
def vllm_engines(ray_cluster, vllm_model_dir, prompt_file, tmp_path_factory):
    """One vLLM server on ``vllm_model_dir`` (`slime_vllm.engines.VLLMEngines`, a Ray actor as
    in a run), guarded by a token, for every test that does not test start-up itself."""
    from slime_core.cluster.network import Network
    from slime_core.testing import make_config
    from slime_vllm.engines import VLLMEngines

    logs = tmp_path_factory.mktemp("vllm-logs")
    config = make_config(
        prompt_file, vllm_model_dir, rollout_batch_size=1, rollout_backend="vllm", router="none", vllm_dtype="float32"
    )
    config = config.replace(output_dir=str(logs), network=Network(False, "test-token-1234"))
    engines = VLLMEngines.start(config, str(vllm_model_dir))
    try:
        yield engines
    finally:
        engines.shutdown()
