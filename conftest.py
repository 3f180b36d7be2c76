"""Root pytest configuration shared by every package's tests.

GPU-marked tests skip cleanly on machines without CUDA; the check imports torch only
when such a test was collected, so CPU-only collections stay fast.
"""

import pytest


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (gpu marker)")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray instance for the whole test session (started on first use), with its
    token and session files in a temporary folder; shut down at the end."""
    from slime_core.testing import ray_session

    with ray_session():
        yield


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Qwen3-architecture model with the character tokenizer, saved once."""
    from slime_core.tools.tiny_models import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"))


@pytest.fixture(scope="session")
def rank_pool():
    """Rank processes kept for the whole session (`slime_core.rank.processes.RankPool`): each
    multi-rank test runs on them instead of spawning its own (seconds of imports each)."""
    from slime_core.rank.processes import RankPool

    pool = RankPool()
    try:
        yield pool
    finally:
        pool.close()
