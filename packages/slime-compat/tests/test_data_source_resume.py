"""A ``--data-source-path`` class's ``save(rollout_id)`` / ``load(rollout_id)`` on our
checkpoints, as slime calls them: a run saved at rollout r and resumed continues the
source where it was (real loop, fake backends, in this process)."""

import logging

import pytest

P = "slime_style_modules."


@pytest.fixture
def seen():
    from slime_style_modules import SEEN

    SEEN.clear()
    return SEEN


@pytest.fixture
def slime_run(digits_loop, tmp_path):
    """``slime_run(source, rollouts, *flags)``: `digits_loop` over 20 prompts with the data source
    class ``source``, each run in a directory of its own."""
    runs = iter(range(100))

    def run(source, rollouts, *flags):
        digits_loop(
            "--custom-rm-path",
            "slime_style_plugins.digit_reward",
            "--data-source-path",
            P + source,
            *flags,
            rollouts=rollouts,
            prompts=20,
            output=f"run{next(runs)}",
        )

    run.ckpt = str(tmp_path / "ckpt")
    return run


def test_a_subclass_of_slime_source_resumes_where_the_checkpoint_left(slime_run, seen):
    slime_run("RecordingSource", 3)
    whole = seen.pop("prompts")
    seen.clear()
    slime_run("RecordingSource", 2, "--save", slime_run.ckpt, "--save-interval", "1")
    assert seen["save"] == [(0,), (1,)] and "load" not in seen
    seen.clear()
    slime_run("RecordingSource", 3, "--load", slime_run.ckpt)
    assert seen["load"] == [(1,)]  # slime's load(start_rollout_id - 1)
    # the same prompts, with the same global indices, as the run that was not interrupted
    assert seen["prompts"] == whole[2:]
    assert [indices for prompt, indices in seen["prompts"][0][0]] == [[8, 9], [10, 11]]


def test_a_source_of_its_own_keeps_its_state_under_args_save(slime_run, seen):
    slime_run("CounterSource", 2, "--save", slime_run.ckpt, "--save-interval", "2")
    assert seen["counter_save"] == [(1, 4)]  # the checkpoint of rollout 1, after 4 groups
    seen.clear()
    slime_run("CounterSource", 3, "--load", slime_run.ckpt)
    assert seen["counter_load"] == [(1,)] and seen["counter_prompts"] == [(["4+1=", "5+1="],)]


def test_a_source_without_save_and_load_is_restarted_with_a_warning(caplog):
    from slime_compat.data_source import SlimeDataSource

    class Bare:
        def get_samples(self, n):
            return []

    source = SlimeDataSource(Bare())
    source.rollout_id = 3
    assert source.state_dict() == {"rollout_id": 3}
    with caplog.at_level(logging.WARNING):
        source.save(3)
        source.load_state_dict({"rollout_id": 3})
    assert "has no save(rollout_id)" in caplog.text and "has no load(rollout_id)" in caplog.text
