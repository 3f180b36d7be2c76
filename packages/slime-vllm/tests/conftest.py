"""Fixtures of the vLLM tests: one vLLM server for the session, started as a run starts it (a
Ray actor, the run's token): the first of the root conftest's ``vllm_server_pair``, which
``tests/test_vllm_loop.py`` shares, on the tiny Qwen3 that vLLM's CPU attention serves
(``vllm_model_dir``, head size 32).

The tests skip only where there is no vLLM to run (no ``import vllm`` here and no
``.venv-vllm``; ``scripts/setup-dev.sh`` makes it, in CI too). Tests that change the shared
server's state (weights, pause) put it back in ``finally``.
"""

from __future__ import annotations

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
def vllm_engines(vllm_server_pair):
    """The first of the session's vLLM servers (a view: it cannot restart or stop them), for
    every test that does not test start-up itself."""
    return vllm_server_pair.only(0)
