"""Fixtures of the FSDP backend's tests: configs and rollout batches for the tiny model."""

import json

import pytest

from slime_core.testing import make_config


@pytest.fixture(scope="session")
def prompt_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    return path


@pytest.fixture
def fsdp_config(prompt_file, tiny_model_dir):
    """``fsdp_config(**overrides)``: a resolved config for the tiny model."""

    def build(**overrides):
        defaults = dict(
            rollout_batch_size=4,
            n_samples_per_prompt=4,
            num_steps_per_rollout=1,
            lr=1e-3,
            rollout_max_response_len=8,
            train_backend="fsdp",
        )
        return make_config(prompt_file, tiny_model_dir, **{**defaults, **overrides})

    return build
