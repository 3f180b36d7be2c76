"""A forward that fails answers its requests with the error instead of leaving them waiting:
the engine loaded in this process (its scheduler thread is the real one), with the model's
first forward made to raise (the one fault here we cannot cause on a supported model)."""

import asyncio

import pytest

from slime_sglang.cpu_engine.engine import load_engine
from slime_sglang.cpu_engine.request import parse_generate


@pytest.fixture
def engine(tiny_model_dir):
    """A CPU engine in this process (its scheduler is a daemon thread, gone with the tests)."""
    return load_engine(str(tiny_model_dir), max_running_requests=4)


def _fail_first_forward(model) -> None:
    forward = model.forward
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise IndexError("the layer's cache is missing")
        return forward(*args, **kwargs)

    model.forward = failing


async def _generate(engine, prompt: list[int]):
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 3, "temperature": 0.0}}
    return await asyncio.wait_for(engine.generate(parse_generate(body, engine.vocab_size, engine.context_length)), 30)


def test_a_failed_prefill_answers_its_requests_with_the_error_and_the_engine_keeps_serving(engine):
    _fail_first_forward(engine.model)
    with pytest.raises(IndexError, match="cache is missing"):
        asyncio.run(_generate(engine, [5, 6, 7]))  # before the fix: waited forever
    answer = asyncio.run(_generate(engine, [5, 6, 7]))
    assert answer["meta_info"]["completion_tokens"] == 3
