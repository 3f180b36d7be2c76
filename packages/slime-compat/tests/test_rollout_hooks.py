"""slime's rollout-side hooks on our default rollout, through the real loop (fake backends,
in this process): ``--rollout-sample-hook-path``, ``--rollout-sample-filter-path``,
``--rollout-all-samples-process-path`` and a generate function that returns a list."""

import pytest

P = "slime_style_rollout."


@pytest.fixture
def seen():
    from slime_style_rollout import SEEN

    SEEN.clear()
    return SEEN


def test_slime_rollout_hooks_and_a_list_returning_generate_function_reach_training(fake_loop, seen):
    from slime_compat.args import run_args

    _, batch = fake_loop(
        "--custom-generate-function-path",
        P + "twin_generate",
        "--rollout-sample-hook-path",
        P + "mark_hook",
        P + "count_hook",
        "--custom-rm-path",
        P + "hooked_twin_reward",
        "--dynamic-sampling-filter-path",
        P + "drop_odd_prompts",
        "--rollout-sample-filter-path",
        P + "remove_originals",
        "--rollout-all-samples-process-path",
        P + "record_all",
        "--no-rollout-shuffle",
        rollouts=1,
    )
    # 2 accepted groups of 2 prompts' samples, each split in two: 8 training samples, in group order
    assert batch.group_ids == [0, 0, 0, 0, 2, 2, 2, 2]
    # the hooks ran before the reward (twins score 1), and the sample filter kept only the twins
    assert batch.rewards == [0.0, 1.0, 0.0, 1.0] * 2
    assert batch.loss_masks == [[0], [1], [0], [1]] * 2
    # both hooks saw every sample, in order, with the keywords they name
    assert seen["hook_kwargs"] == [(0, ["evaluation", "rollout_id"])] * len(seen["hook_kwargs"])
    assert len(seen["hook_kwargs"]) >= 8
    assert seen["filter"] == [[4, 4]]
    (all_prompts,) = seen["all"]
    assert {"0+1=", "1+1=", "2+1="} <= set(all_prompts)  # the filtered-out group 1 included
    assert run_args().processed_group_count == len(all_prompts)


def test_flags_select_the_native_hooks_and_keep_native_names(make_config):
    config, plugins = make_config(
        "--sample-filter",
        "drop_truncated",
        "--rollout-sample-hook-path",
        P + "mark_hook",
        P + "count_hook",
        "--rollout-sample-filter-path",
        P + "remove_originals",
        "--rollout-all-samples-process-path",
        P + "record_all",
    )
    assert config.sample_hook == ["slime.rollout_sample_hooks"]
    assert config.rollout_sample_hook_path == [P + "mark_hook", P + "count_hook"]
    assert config.sample_filter == ["drop_truncated", "slime.rollout_sample_filter"]
    assert config.all_groups_hook == ["slime.rollout_all_samples_process"]


def test_a_generate_function_returning_something_else_says_what_to_return():
    from slime_core.rollout.generate import produced_samples
    from slime_core.sample import Sample

    parent = Sample(group_index=3, index=1)
    child = Sample()
    assert produced_samples([parent, child], parent, None) == [parent, child]
    assert (child.group_index, child.index) == (3, 1)  # a new sample joins its parent's group
    assert produced_samples(None, parent, None) == [parent]  # a function that works in place
    with pytest.raises(TypeError, match="non-empty list of Samples"):
        produced_samples({"text": "x"}, parent, None)
