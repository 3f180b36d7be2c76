"""Root pytest configuration shared by every package's tests.

GPU-marked tests skip cleanly on machines without CUDA; the check imports torch only
when such a test was collected, so CPU-only collections stay fast. The shared fixtures (a Ray
session, the tiny model, the rank pool, runs on the fake backends) are slime-core's test kit's,
`slime_core.testing.pytest_plugin`, which pytest loads through its entry point.
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
