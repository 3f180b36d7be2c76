"""slime's rollout-side hooks on our default rollout, through the real loop (fake backends,
in this process): ``--rollout-sample-hook-path``, ``--rollout-sample-filter-path``,
``--rollout-all-samples-process-path`` and a generate function that returns a list."""

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[3] / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

P = "slime_style_rollout."


@pytest.fixture
def seen():
    from slime_style_rollout import SEEN

    SEEN.clear()
    return SEEN


def _run(tmp_path, tiny_model_dir, *flags):
    """One rollout of 2 groups x 2 samples on the fake backends; the batch the trainer got."""
    from fake_backends import FakeBackendsPlugin, Recorder
    from slime_core.cli.run import run_command
    from slime_core.plugins import Plugins

    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(f'{{"prompt": "{i}+1=", "label": "{i + 1}"}}\n' for i in range(8)))
    plugins = Plugins()
    plugins.register_object("fake_backends", FakeBackendsPlugin)
    Recorder.reset()
    try:
        code = run_command(["--actor-runtime", "inprocess", "--train-backend", "fake", "--rollout-backend", "fake",
                            "--router", "fake", "--prompt-data", str(data), "--hf-checkpoint", str(tiny_model_dir),
                            "--rollout-batch-size", "2", "--n-samples-per-prompt", "2", "--rollout-max-response-len", "4",
                            "--num-rollout", "1", "--no-rollout-shuffle", "--output-dir", str(tmp_path / "run"), *flags],
                           plugins)
    finally:
        plugins.unregister("fake_backends")
    assert code == 0
    return Recorder.ranks[0].batch


def test_slime_rollout_hooks_and_a_list_returning_generate_function_reach_training(tiny_model_dir, tmp_path, seen):
    from slime_compat.args import run_args

    batch = _run(tmp_path, tiny_model_dir,
                 "--custom-generate-function-path", P + "twin_generate",
                 "--rollout-sample-hook-path", P + "mark_hook", P + "count_hook",
                 "--custom-rm-path", P + "hooked_twin_reward",
                 "--dynamic-sampling-filter-path", P + "drop_odd_prompts",
                 "--rollout-sample-filter-path", P + "remove_originals",
                 "--rollout-all-samples-process-path", P + "record_all")
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
    config, plugins = make_config("--sample-filter", "drop_truncated",
                                  "--rollout-sample-hook-path", P + "mark_hook", P + "count_hook",
                                  "--rollout-sample-filter-path", P + "remove_originals",
                                  "--rollout-all-samples-process-path", P + "record_all")
    assert config.sample_hook == ["slime.rollout_sample_hooks"]
    assert config.rollout_sample_hook_path == [P + "mark_hook", P + "count_hook"]
    assert config.sample_filter == ["drop_truncated", "slime.rollout_sample_filter"]
    assert config.all_groups_hook == ["slime.rollout_all_samples_process"]


def test_a_generate_function_returning_something_else_says_what_to_return():
    from slime_core.sample import Sample
    from slime_sglang.generate import produced_samples

    parent = Sample(group_index=3, index=1)
    child = Sample()
    assert produced_samples([parent, child], parent, None) == [parent, child]
    assert (child.group_index, child.index) == (3, 1)  # a new sample joins its parent's group
    assert produced_samples(None, parent, None) == [parent]  # a function that works in place
    with pytest.raises(TypeError, match="non-empty list of Samples"):
        produced_samples({"text": "x"}, parent, None)
