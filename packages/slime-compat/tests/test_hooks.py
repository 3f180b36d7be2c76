"""slime's ``--*-path`` functions, written in slime's style, called through our components as
slime calls them: config selection, rewards, generation, rollout, eval, filters, data source."""

import asyncio

import pytest

from slime_core.config import ConfigError
from slime_core.engine import SamplingParams
from slime_core.rollout.filters import RolloutProgress
from slime_core.rollout.parts import GenerateContext, RolloutParts
from slime_core.sample import Sample as CoreSample
from slime_core.sample import SampleStatus

P = "slime_style_plugins."


def test_each_mapped_flag_selects_its_adapter(make_config):
    config, plugins = make_config(
        "--custom-rm-path",
        P + "digit_reward",
        "--custom-generate-function-path",
        P + "x",
        "--rollout-function-path",
        P + "x",
        "--eval-function-path",
        P + "x",
        "--dynamic-sampling-filter-path",
        P + "x",
        "--buffer-filter-path",
        P + "x",
        "--data-source-path",
        P + "x",
    )
    selected = [
        config.rm_type,
        config.generate_function,
        config.rollout_function,
        config.eval_function,
        config.dynamic_sampling_filter,
        config.buffer_filter,
        config.data_source,
    ]
    assert selected == [
        "slime.custom_rm",
        "slime.custom_generate",
        "slime.rollout_function",
        "slime.eval_function",
        "slime.dynamic_sampling_filter",
        "slime.buffer_filter",
        "slime.data_source",
    ]
    assert plugins.registry("reward_functions").entry("slime.custom_rm").distribution.startswith("slime-compat")


def test_naming_slime_own_functions_selects_ours(make_config):
    config, _ = make_config(
        "--rollout-function-path",
        "slime.rollout.sft_rollout.generate_rollout",
        "--buffer-filter-path",
        "slime.rollout.data_source.pop_first",
        "--data-source-path",
        "slime.rollout.data_source.RolloutDataSourceWithBuffer",
        "--dynamic-sampling-filter-path",
        "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std",
    )
    assert (config.rollout_function, config.buffer_filter, config.data_source, config.dynamic_sampling_filter) == (
        "slime.rollout_function_without_engines",
        "fifo",
        "prompt",
        "nonzero_std",
    )


def test_flags_that_cannot_run_as_given_are_refused_together_with_the_reason(make_config):
    with pytest.raises(ConfigError) as error:
        make_config(
            "--custom-loss-function-path",
            P + "x",
            "--train-backend",
            "fsdp",
            "--custom-megatron-init-path",
            P + "x",
            "--custom-megatron-before-log-prob-hook-path",
            "slime.backends.megatron_utils.alignment.deepgemm_forward.enable_deepgemm_all_forward",
        )
    message = str(error.value)
    assert "--custom-loss-function-path: slime calls it only with --loss-type custom_loss" in message
    assert "--custom-megatron-init-path: slime calls it in its Megatron actor, and only the Megatron backend" in message
    assert "choose their own kernels: drop the flag" in message  # slime's own function done another way says which


def test_slime_s_fully_async_rollout_is_our_default_rollout_in_async_mode(make_config):
    path = "slime.rollout.fully_async_rollout.generate_rollout_fully_async"
    config, _ = make_config("--rollout-function-path", path)
    assert (config.rollout_function, config.train_mode) == ("default", "async")
    assert config.sources["train_mode"] == f"--rollout-function-path {path}"


@pytest.mark.parametrize(
    ("path", "selected"),
    [
        (P + "rollout", "slime.rollout_function"),
        ("slime.rollout.sft_rollout.generate_rollout", "slime.rollout_function_without_engines"),
    ],
)
def test_a_rollout_function_path_runs_with_debug_train_only(make_config, path, selected):
    """--debug-train-only starts no engines, which slime-core refuses for the default rollout
    function only: a launch script's own rollout function is selected before that check."""
    config, _ = make_config("--debug-train-only", "--rollout-function-path", path)
    assert (config.debug_train_only, config.rollout_function) == (True, selected)


def _groups(n_groups=1, size=2, response="a1"):
    return [
        [CoreSample(group_index=g, index=i, prompt="p", response=response, label="1") for i in range(size)]
        for g in range(n_groups)
    ]


def test_custom_rm_is_called_with_args_and_a_slime_sample_and_persists_args_writes(make_config, calls):
    from slime.utils.types import Sample
    from slime_core.rollout.reward_hub import RewardHub

    config, plugins = make_config("--custom-rm-path", P + "digit_reward")
    (group,) = _groups()
    group[1].metadata["custom_rm_path"] = P + "per_sample_reward"  # a sample's own function wins
    hub = RewardHub(config, plugins)
    try:
        asyncio.run(hub.score_group(group))
    finally:
        hub.close()
    assert [s.reward for s in group] == [0.5, 0.25]
    assert calls["rm"] == [(Sample, SampleStatus.PENDING, 2)]
    from slime_compat.args import slime_args

    assert slime_args(config).rm_calls == 1  # what the function wrote on args is kept


def test_group_rm_gets_the_whole_group_once(make_config, calls):
    from slime_core.rollout.reward_hub import RewardHub

    config, plugins = make_config("--custom-rm-path", P + "group_reward", "--group-rm")
    (group,) = _groups(size=3)
    hub = RewardHub(config, plugins)
    try:
        asyncio.run(hub.score_group(group))
    finally:
        hub.close()
    assert [s.reward for s in group] == [0.0, 1.0, 2.0] and calls["group_rm"] == [(3,)]


class _Router:
    url = "http://10.0.0.7:30001"


def test_generate_function_gets_args_with_the_router_and_sglang_sampling_params(make_config, calls):
    config, plugins = make_config("--custom-generate-function-path", P + "digits_generate")
    generate = plugins.registry("generate_functions").get(config.generate_function)
    sample = CoreSample(prompt="p", tokens=[1, 2], index=0)
    out = asyncio.run(generate(sample, SamplingParams(max_new_tokens=5), GenerateContext(_Router(), None, config)))
    assert out is sample and (out.response, out.loss_mask, out.rollout_log_probs) == ("7", [1], [-0.5])
    assert out.status is SampleStatus.COMPLETED and out.weight_versions == [0]
    assert calls["generate"] == [("10.0.0.7", 5, False)]


class _Source:
    """Our data source contract, over fixed groups."""

    def __init__(self, groups):
        self.groups, self.added = groups, []

    def get_samples(self, n):
        taken, self.groups = self.groups[:n], self.groups[n:]
        return taken

    def add_samples(self, groups):
        self.added += groups


def _parts(groups):
    return RolloutParts(_Source(groups), None, None, None, GenerateContext(_Router(), None, None))


@pytest.mark.parametrize("function", ["labels_rollout", "legacy_rollout", "flat_rollout"])
def test_rollout_function_outputs_become_our_groups(make_config, function):
    config, plugins = make_config("--rollout-function-path", P + function)
    rollout = plugins.registry("rollout_functions").get(config.rollout_function)
    result = asyncio.run(rollout(3, config, _parts(_groups(n_groups=3, response=""))))
    assert [[s.group_index for s in g] for g in result.groups] == [[0, 0], [1, 1]]
    assert all(s.response == "1" and s.reward == 1.0 for g in result.groups for s in g)
    assert result.metrics == ({"rollout/custom": 3} if function == "labels_rollout" else {})


@pytest.mark.parametrize(
    "function, expected",
    [
        ("eval_rollout", {"eval/toy": 0.5, "eval/toy-truncated_ratio": 0.5, "eval/extra": 3}),
        ("legacy_eval", {"eval/toy": 0.5}),
    ],
)
def test_eval_function_outputs_become_eval_metrics(make_config, calls, function, expected):
    config, plugins = make_config("--eval-function-path", P + function)
    evaluate = plugins.registry("eval_functions").get(config.eval_function)
    result = asyncio.run(evaluate(config, _parts([]), {}))
    assert result.metrics == expected and result.groups == {}  # no samples returned: none for slime_log_eval


@pytest.mark.parametrize(
    "function, accepted, in_flight, keep",
    [
        ("keep_mixed", 0, 0, False),  # equal rewards: dropped
        ("drop_all_but_scarce", 0, 4, False),  # enough candidates left: dropped
        ("drop_all_but_scarce", 1, 0, True),  # too few left: kept (keep_when_insufficient)
        ("legacy_bool_filter", 0, 0, False),
    ],
)
def test_dynamic_sampling_filter_verdicts(make_config, function, accepted, in_flight, keep):
    config, plugins = make_config("--dynamic-sampling-filter-path", P + function)
    group_filter = plugins.registry("group_filters").get(config.dynamic_sampling_filter)
    (group,) = _groups()
    for sample in group:
        sample.reward = 1.0
    assert group_filter(group, config, RolloutProgress(needed=2, accepted=accepted, in_flight=in_flight)) is keep


def test_buffer_filter_chooses_from_our_buffer(make_config):
    from slime_compat.args import remember_run
    from slime_core.data.buffer import GroupBuffer

    config, plugins = make_config("--buffer-filter-path", P + "newest_first")
    remember_run(config)
    buffer = GroupBuffer(plugins.registry("buffer_filters").get(config.buffer_filter))
    groups = _groups(n_groups=3)
    buffer.add(groups)
    assert buffer.take(1) == [groups[2]] and buffer.groups == groups[:2]


def test_data_source_class_is_built_from_args_and_serves_slime_samples(make_config):
    config, plugins = make_config("--data-source-path", P + "CountingSource")
    source = plugins.registry("data_sources").get(config.data_source).from_config(config, None, None)
    groups = source.get_samples(2)
    assert [[s.prompt for s in g] for g in groups] == [["q0", "q0"], ["q1", "q1"]]
    source.add_samples(groups[:1])
    assert source.source.returned == groups[:1]


def test_args_hold_the_chat_template_kwargs_parsed_as_slime_s_do(make_config):
    from slime_compat.args import slime_args

    config, _ = make_config("--apply-chat-template", "--apply-chat-template-kwargs", '{"enable_thinking": false}')
    assert slime_args(config).apply_chat_template_kwargs == {"enable_thinking": False}
    assert slime_args(make_config()[0]).apply_chat_template_kwargs == {}  # so `**args.apply_...` works
