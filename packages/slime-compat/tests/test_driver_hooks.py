"""slime's driver-side functions (reward post-process, conversion to train data, rollout log,
custom config), written in slime's style below and named by dotted path, through the real
loop with the in-process fake backends; the native extension points they sit on; and the
rank's step, which must not normalise post-processed rewards again."""

import importlib

import pytest
import torch

from slime_core.config import ConfigError

HERE = "test_driver_hooks."  # this module, as a launch script names its functions
P = "slime_style_plugins."

# ---------------------------------------------------------------- slime-style user functions

SEEN: dict[str, list] = {}  # what each function below was called with (in the module instance slime-compat loads)


def ten_x_plus_one(args, samples):
    """Raw rewards as scored; trained on: 10 r + 1 (no group normalisation)."""
    SEEN.setdefault("post", []).append((type(samples[0]).__name__, len(samples), args.n_samples_per_prompt))
    raw = [sample.get_reward_value(args) for sample in samples]
    return raw, [10 * r + 1 for r in raw]


def doubled_train_data(args, samples):
    """slime's dict, with the keys of slime's own conversion that our loop derives itself."""
    return {
        "tokens": [sample.tokens for sample in samples],
        "response_lengths": [sample.response_length for sample in samples],
        "loss_masks": [sample.loss_mask for sample in samples],
        "rewards": [2 * sample.reward for sample in samples],
        "raw_reward": [sample.reward for sample in samples],
        "truncated": [0 for _ in samples],
        "sample_indices": [sample.index for sample in samples],
    }


def record_and_skip(rollout_id, args, samples, rollout_extra_metrics, rollout_time) -> bool:
    SEEN.setdefault("log", []).append((rollout_id, len(samples), dict(rollout_extra_metrics), rollout_time))
    return True


def record_and_keep(rollout_id, args, samples, rollout_extra_metrics, rollout_time) -> bool:
    SEEN.setdefault("log", []).append((rollout_id, len(samples), dict(rollout_extra_metrics), rollout_time))
    return False


async def bonus_reward(args, sample, **kwargs) -> float:
    """1 for a digit answer, 0 otherwise, plus ``args.digit_bonus`` from --custom-config-path."""
    return float(sample.response.isdigit()) + args.digit_bonus


# ---------------------------------------------------------------- helpers


@pytest.fixture
def seen():
    module = importlib.import_module(HERE[:-1])
    module.SEEN.clear()
    return module.SEEN


# ---------------------------------------------------------------- through the loop


def test_post_processed_rewards_are_trained_on_and_the_raw_ones_logged_with_custom_config_and_a_log_function(
    digits_loop, tmp_path, seen
):
    config_file = tmp_path / "extra.yaml"
    config_file.write_text("digit_bonus: 0.5\n")
    records, batch = digits_loop(
        "--custom-rm-path",
        HERE + "bonus_reward",
        "--custom-config-path",
        str(config_file),
        "--custom-reward-post-process-path",
        HERE + "ten_x_plus_one",
        "--custom-rollout-log-function-path",
        HERE + "record_and_keep",
    )
    # each group answers "7" (1 + 0.5) then "x" (0 + 0.5): trained on 10 r + 1, as returned
    assert batch.raw_rewards == [1.5, 0.5, 1.5, 0.5] and batch.rewards == [16.0, 6.0, 16.0, 6.0]
    assert seen["post"] == [("Sample", 4, 2)] * 2  # slime Samples, args first, once per rollout
    for record in records:
        assert record["rollout/reward_mean"] == 1.0  # the raw rewards are logged
        assert record["rollout/post_processed_reward_mean"] == 11.0
        assert record["rollout/response_length_mean"] == 1.0  # the log function returned False: defaults kept
    (rollout_id, count, extra, seconds), _ = seen["log"]
    assert (rollout_id, count) == (0, 4) and seconds == extra["perf/rollout_seconds"] > 0


def test_converted_train_data_reaches_the_rank_and_a_true_log_function_leaves_out_the_default_metrics(
    digits_loop, seen
):
    records, batch = digits_loop(
        "--custom-rm-path",
        P + "digit_reward",
        "--custom-convert-samples-to-train-data-path",
        HERE + "doubled_train_data",
        "--custom-rollout-log-function-path",
        HERE + "record_and_skip",
    )
    assert batch.rewards == [2.0, 0.0, 2.0, 0.0] and batch.raw_rewards == [1.0, 0.0, 1.0, 0.0]
    assert batch.group_ids[0] == batch.group_ids[1] != batch.group_ids[2] == batch.group_ids[3]
    assert batch.rollout_log_probs == [[-0.5]] * 4  # not in the dict: from the samples it was made of
    assert [r[:2] for r in seen["log"]] == [(0, 4), (1, 4)]
    for record in records:
        assert not any(key.startswith("rollout/reward") or key.startswith("rollout/response_length") for key in record)
        assert "perf/rollout_seconds" not in record  # the rollout's own metrics are left out too
        assert "train/loss" in record and "time/rollout" in record  # training and timings still logged


# ---------------------------------------------------------------- the train rank


def test_the_rank_trains_on_post_processed_rewards_without_normalising_them_again(make_config):
    import torch

    from slime_core.rank.step import RankStep
    from slime_core.rollout_batch import RolloutBatch

    config, _ = make_config("--advantage-estimator", "grpo", "--num-steps-per-rollout", "1", "--global-batch-size", "4")
    batch = RolloutBatch(
        tokens=[[5, 6, 6]] * 4,
        response_lengths=[2] * 4,
        loss_masks=[[1, 1]] * 4,
        rewards=[3.0, 1.0, 2.0, 2.0],
        group_ids=[0, 0, 1, 1],
        rollout_log_probs=[[0.0, 0.0]] * 4,
    )
    step = RankStep(config)
    normalised = step.tensors(batch, None, reference=False, teacher=False).advantages
    batch.raw_rewards = [1.0, 0.0, 1.0, 1.0]
    as_given = step.tensors(batch, None, reference=False, teacher=False).advantages
    assert as_given.tolist() == [[3.0, 3.0], [1.0, 1.0], [2.0, 2.0], [2.0, 2.0]]
    # without raw rewards, grpo centres per group and divides by the std: (3 - 2) / (√2 + 1e-6)
    assert normalised[0, 0].item() == pytest.approx(1 / (2**0.5 + 1e-6)) and normalised[2].tolist() == [0.0, 0.0]
    assert torch.equal(normalised[1], -normalised[0])


# ---------------------------------------------------------------- the train-data dict


def _samples():
    from slime_core.sample import Sample

    samples = []
    for group in range(2):
        for index in range(2):
            sample = Sample(group_index=group, index=index, tokens=[1, 2], reward=float(index))
            sample.append_response([group + 3, index + 3], log_probs=[-0.1, -0.2])
            samples.append(sample)
    return samples


def _dict(samples, **extra):
    return {
        "tokens": [s.tokens for s in samples],
        "response_lengths": [s.response_length for s in samples],
        "loss_masks": [s.loss_mask for s in samples],
        "rewards": [s.reward for s in samples],
        **extra,
    }


def test_the_train_data_dict_maps_onto_the_batch_with_slime_s_rollout_ids_and_our_group_indices(make_config):
    from slime_compat.train_data import batch_from_train_data

    config, _ = make_config()
    samples = _samples()
    batch = batch_from_train_data(_dict(samples, rollout_ids=[7, 7, 8, 9]), samples, config, "fn")
    assert batch.group_ids == [0, 0, 1, 1] and batch.raw_rewards == batch.rewards == [0.0, 1.0, 0.0, 1.0]
    assert batch.rollout_ids == [(0, "rollout", 7), (0, "rollout", 7), (1, "rollout", 8), (1, "rollout", 9)]
    assert batch.teacher_log_probs is None
    teacher = [torch.tensor([-0.5, -0.25])] * 4  # on-policy distillation's, as slime's conversion gives them
    assert (
        batch_from_train_data(_dict(samples, teacher_log_probs=teacher), samples, config, "fn").teacher_log_probs
        == [[-0.5, -0.25]] * 4
    )
    reordered = samples[::-1]  # entries no longer the samples in order: they must say their group
    with pytest.raises(ValueError, match="add 'group_indices': one per entry, the Sample.group_index"):
        batch_from_train_data(_dict(reordered), samples, config, "fn")
    batch = batch_from_train_data(
        _dict(reordered, group_indices=[1, 1, 0, 0], rollout_log_probs=[[0.0, 0.0]] * 4), samples, config, "fn"
    )
    assert batch.group_ids == [1, 1, 0, 0] and batch.tokens[0] == [1, 2, 4, 4]


def test_a_train_data_dict_with_a_missing_unknown_or_unsupported_key_is_refused_naming_it(make_config):
    from slime_compat.train_data import batch_from_train_data

    config, _ = make_config()
    samples = _samples()
    data = _dict(samples)
    del data["loss_masks"]
    with pytest.raises(
        ValueError, match="lacks loss_masks; add, one per entry: 'loss_masks': one 0/1 per response token"
    ):
        batch_from_train_data(data, samples, config, "fn")
    with pytest.raises(ValueError, match="unknown train-data key 'advantage'"):
        batch_from_train_data(_dict(samples, advantage=[0] * 4), samples, config, "fn")
    with pytest.raises(ValueError, match="'metadata'.*slime's Megatron loss functions"):
        batch_from_train_data(_dict(samples, metadata=[{}] * 4), samples, config, "fn")
    with pytest.raises(ValueError, match="'rewards' has 3 entries and 'tokens' 4"):
        batch_from_train_data({**_dict(samples), "rewards": [0.0] * 3}, samples, config, "fn")


# ---------------------------------------------------------------- config time


def test_the_flags_select_the_native_extension_points(make_config):
    config, plugins = make_config("--custom-reward-post-process-path", HERE + "ten_x_plus_one")
    assert config.reward_post_process == "slime.reward_post_process"
    assert (
        plugins.registry("reward_post_processors")
        .entry("slime.reward_post_process")
        .distribution.startswith("slime-compat")
    )
    config, _ = make_config("--custom-convert-samples-to-train-data-path", HERE + "doubled_train_data")
    assert config.train_data_converter == "slime.convert_samples_to_train_data"


def test_post_process_with_a_converter_and_a_custom_config_setting_an_option_are_config_errors(make_config, tmp_path):
    extra = tmp_path / "extra.yaml"
    extra.write_text("max_turns: 3\nrollout_batch_size: 8\n")
    with pytest.raises(ConfigError) as error:
        make_config(
            "--custom-reward-post-process-path",
            HERE + "ten_x_plus_one",
            "--custom-convert-samples-to-train-data-path",
            HERE + "doubled_train_data",
            "--custom-config-path",
            str(extra),
        )
    message = str(error.value)
    assert "--custom-reward-post-process-path" in message and "has no effect with" in message
    assert "sets 'rollout_batch_size', which is an option here (--rollout-batch-size, now 2)" in message
    assert "max_turns" not in message  # not an option: set on args for the user's functions
    extra.write_text("- a list\n")
    with pytest.raises(ConfigError, match="cannot read it: it holds a YAML list"):
        make_config("--custom-config-path", str(extra))


def test_a_native_post_processor_feeds_the_default_batch_and_a_wrong_count_is_refused_naming_it(make_config):
    from slime_core import hookimpl
    from slime_core.rollout_batch import train_batch

    class Native:
        @staticmethod
        @hookimpl
        def slime_register_reward_post_processors(register):
            register("negated", lambda samples, config: ([s.reward for s in samples], [-s.reward for s in samples]))
            register("short", lambda samples, config: ([0.0], [0.0]))

    config, plugins = make_config()
    plugins.register_object("native_post", Native)
    try:
        config = config.replace(reward_post_process="negated")  # the config is frozen: a changed copy
        batch = train_batch(_samples(), config, plugins)
        assert batch.rewards == [-0.0, -1.0, -0.0, -1.0] and batch.raw_rewards == [0.0, 1.0, 0.0, 1.0]
        config = config.replace(reward_post_process="short")
        with pytest.raises(
            ValueError, match="reward post-processor 'short' returned 1 raw rewards and 1 rewards for 4"
        ):
            train_batch(_samples(), config, plugins)
    finally:
        plugins.unregister("native_post")
