"""The engine plugin in a real ``slime run`` in this process, through slime-core's test kit
(``install_plugin``, ``fake_run``): the run's other parts are the kit's fakes except the train
backend, FSDP on CPU, whose weights (real Hugging Face tensors) the engine must take."""

from pathlib import Path

import pytest

from slime_core.testing import Recorder

PLUGIN = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def installed(install_plugin):
    """The plugin, installed from this folder, as its users install it."""
    return install_plugin(PLUGIN)


def test_the_engine_generates_and_takes_the_trainers_weights(fake_run):
    records = fake_run(
        "--train-backend",
        "fsdp",
        "--rollout-backend",
        "hf-inprocess",
        "--router",
        "none",
        "--lr",
        "1e-2",
        "--num-rollout",
        "2",
        "--check-weight-update-equal",
    )
    assert [r["rollout_id"] for r in records] == [0, 1]
    assert all(r["rollout/response_length_mean"] > 0 and r["rollout/samples"] == 16 for r in records)
    assert all(r["rollout/reward_std"] > 0 and r["train/grad_norm"] > 0 for r in records)  # the weights moved
    # the engine's log-probs equal the trainer's after each push: the new weights arrived intact
    assert all(r["weight_update/max_logprob_diff"] < 1e-3 and r["weight_update/bytes"] > 0 for r in records)
    assert "backend.start" not in Recorder.calls  # the plugin's engine ran, not the fake one
