"""Root pytest configuration shared by every package's tests.

GPU-marked tests skip cleanly on machines without CUDA; the check imports torch only
when such a test was collected, so CPU-only collections stay fast. The shared fixtures (a Ray
session, the tiny model, the rank pool, runs on the fake backends) are slime-core's test kit's,
`slime_core.testing.pytest_plugin`, which pytest loads through its entry point.

The vLLM fixtures are here because two test folders share them: ``tests/test_vllm_loop.py``'s
run on two engines and packages/slime-vllm/tests use one pair of vLLM servers for the session
(a vLLM server takes half a minute to start on CPU); they import vLLM's package only when a
test asks for them.
"""

from __future__ import annotations

import json

import pytest

from slime_core import hookimpl

#: The session fixture of the shared vLLM servers (see `vllm_server_pair`).
VLLM_PAIR = "vllm_server_pair"
#: The pair once started, and the last collected test that uses it (it stops the pair).
_vllm_pair: dict = {}


def pytest_collection_modifyitems(config, items):
    _run_vllm_pair_users_together(items)
    _skip_gpu_tests_without_cuda(items)


def _skip_gpu_tests_without_cuda(items) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (gpu marker)")
    for item in gpu_items:
        item.add_marker(skip)


def _run_vllm_pair_users_together(items) -> None:
    """The tests on the session's vLLM servers (``tests/test_vllm_loop.py``, packages/slime-vllm)
    run in one stretch, moved to where the last of them stands, and the servers stop after it
    (`pytest_runtest_teardown`): otherwise they would hold their memory (about 3 GB each) while
    every package's tests run in between."""
    users = [item for item in items if VLLM_PAIR in getattr(item, "fixturenames", ())]
    if not users:
        return
    _vllm_pair["last_user"] = users[-1]
    user_ids = {id(item) for item in users}
    others = [item for item in items if id(item) not in user_ids]
    before_last = items.index(users[-1]) - (len(users) - 1)  # the others ahead of the last user
    items[:] = others[:before_last] + users + others[before_last:]


def pytest_runtest_teardown(item, nextitem):
    """Stops the session's vLLM servers once the last test on them is done (see above)."""
    if item is _vllm_pair.get("last_user") and "engines" in _vllm_pair:
        _vllm_pair.pop("engines").shutdown()


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory):
    """The tiny random Qwen3 with hidden size 128 (4 heads of 32, tied embeddings): the suite's
    hidden-64 model has heads of 16, which vLLM's CPU attention does not take."""
    from slime_core.tools.tiny_models import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3-128"), hidden_size=128)


@pytest.fixture(scope="session")
def vllm_server_pair(ray_cluster, vllm_model_dir, tmp_path_factory):
    """Two vLLM servers on ``vllm_model_dir`` (`slime_vllm.engines.VLLMEngines`, Ray actors as in
    a run, guarded by a token), started once for every test that does not test start-up or
    replacement itself, stopped after the last of them; their logs are ``engines/engine_<i>.log``
    under ``vllm_server_pair.log_dir``.
    A test that changes their state (weights, pause) puts it back in ``finally``."""
    from slime_core.cluster.network import Network
    from slime_core.testing import make_config
    from slime_vllm.engines import VLLMEngines

    logs = tmp_path_factory.mktemp("vllm-logs")
    prompts = logs / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    config = make_config(
        prompts,
        vllm_model_dir,
        rollout_batch_size=1,
        rollout_backend="vllm",
        router="none",
        vllm_dtype="float32",
        rollout_num_gpus=2,
    )
    config = config.replace(output_dir=str(logs), network=Network(False, "test-token-1234"))
    engines = VLLMEngines.start(config, str(vllm_model_dir))
    engines.log_dir = logs
    _vllm_pair["engines"] = engines
    try:
        yield engines
    finally:
        engines.shutdown()  # a no-op once the last test on the pair stopped it


class SharedVLLMServers:
    """Rollout backend ``vllm-shared``: the first ``count`` of the session's vLLM servers as the
    run's engines (a view that the run can neither restart nor stop), and vLLM's client with
    their token. Engines a run did not start may hold any weights, so the run pushes its
    trainer's weights before the first rollout (as for external engines); the test puts the
    servers' own weights back after (`restore`)."""

    def __init__(self, pair, count: int):
        from slime_vllm.engines import VLLMEngines

        self.pair = pair
        self.view = VLLMEngines(pair.urls[:count], [], None, pair._network, pair._gpus)

    @hookimpl
    def slime_register_rollout_backends(self, register):
        register("vllm-shared", self)

    def engine_bundles(self, config, gpu: bool) -> list[dict[str, float]]:
        return []  # already running: nothing to place

    def start(self, config, actor_options=None, plugins=None):
        return self.view

    def client(self, url: str, api_key: str | None = None):
        from slime_vllm.client import VLLMClient

        return VLLMClient(url, api_key=self.pair._network.token)

    def restore(self, model_dir) -> None:
        """Every server back on ``model_dir``'s weights (version "default"), its cache flushed."""
        import asyncio

        asyncio.run(self.pair.update_weights_from_disk(str(model_dir), "default"))
        asyncio.run(self.pair.flush_cache())


@pytest.fixture(scope="session")
def vllm_shared_backend(vllm_server_pair):
    """``vllm_shared_backend(count)``: the plugin object of rollout backend ``vllm-shared``
    (`SharedVLLMServers`) on the first ``count`` of the session's two vLLM servers."""
    return lambda count: SharedVLLMServers(vllm_server_pair, count)
