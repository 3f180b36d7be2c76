"""The ``slime`` namespace: every module slime's user code imports resolves, and its `Sample`
is ours with slime's fields and helpers."""

import importlib

import pytest

from slime_core.sample import Sample as CoreSample

MODULES = [
    "slime.utils.types",
    "slime.utils.misc",
    "slime.utils.http_utils",
    "slime.utils.mask_utils",
    "slime.backends.megatron_utils.loss",
    "slime.rollout.base_types",
    "slime.rollout.rm_hub",
    "slime.rollout.sglang_rollout",
    "slime.rollout.filter_hub.base_types",
    "slime.rollout.filter_hub.dynamic_sampling_filters",
    "slime.rollout.rm_hub.math_dapo_utils",
]


@pytest.mark.parametrize("name", MODULES)
def test_each_module_slime_code_imports_resolves(name):
    assert importlib.import_module(name).__doc__


def test_sample_is_a_core_sample_with_slime_fields_and_status():
    from slime.utils.types import Sample

    sample = Sample(prompt="q", tokens=[5, 6], label="a", custom_rm_path="pkg.rm")
    assert isinstance(sample, CoreSample) and Sample.Status.TRUNCATED.value == "truncated"
    sample.append_response_tokens(
        None,
        tokens=[7, 8],
        log_probs=[-0.1, -0.2],
        text="ab",
        meta_info={"finish_reason": {"type": "length"}, "weight_version": "3"},
    )
    sample.append_response_tokens(None, tokens=[9], trainable=False, text="!", update_terminal_info=False)
    assert (sample.response, sample.response_length, sample.loss_mask) == ("ab!", 3, [1, 1, 0])
    assert sample.rollout_log_probs == [-0.1, -0.2, 0.0] and sample.weight_versions == [3]
    assert sample.status is Sample.Status.TRUNCATED and sample.effective_response_length == 2
    sample.reward = {"acc": 1.0}

    class Args:
        reward_key = "acc"

    assert sample.get_reward_value(Args) == 1.0


def test_routed_experts_in_sglang_s_answer_become_the_sample_s_rows():
    """SGLang answers base64 int32 ids, (tokens fed, num_layers, top_k); a continuation from
    ``routed_experts_start_len`` replaces the rows from there, as slime's Sample does."""
    from slime.utils.types import Sample
    from slime_core.engine import encode_int32s

    sample = Sample(prompt="q", tokens=[5, 6])
    meta = {"routed_experts": encode_int32s(list(range(12)))}  # 3 tokens fed × 2 layers × top 2
    sample.append_response_tokens(None, tokens=[7, 8], log_probs=[-0.1, -0.2], meta_info=meta)
    assert sample.rollout_routed_experts == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    meta = {"routed_experts": encode_int32s([9] * 8), "routed_experts_start_len": 2}
    sample.append_response_tokens(None, tokens=[1], log_probs=[-0.3], meta_info=meta)
    assert sample.rollout_routed_experts == [[0, 1, 2, 3], [4, 5, 6, 7], [9] * 4, [9] * 4]


def test_to_dict_loads_with_the_core_and_the_extras_come_back_on_promotion():
    from slime.utils.types import Sample
    from slime_compat.sample import promote

    data = Sample(prompt="q", custom_rm_path="pkg.rm", teacher_log_probs=[-1.0]).to_dict()
    core = CoreSample.from_dict(data)  # a checkpoint's buffer or saved rollout loads with the core
    assert type(core) is CoreSample
    assert promote(core) is core and type(core) is Sample
    assert (core.custom_rm_path, core.teacher_log_probs, core.metadata) == ("pkg.rm", [-1.0], {})
    assert Sample.from_dict({**data, "session_id": "s"}).session_id == "s"  # slime's own dicts too


def test_load_function_takes_slime_dotted_paths_and_says_what_is_missing():
    from slime.utils.misc import load_function

    assert load_function("slime_style_plugins.keep_mixed").__name__ == "keep_mixed"
    with pytest.raises(AttributeError, match="has no 'nope'"):
        load_function("slime_style_plugins.nope")


def test_nonzero_std_filter_and_mask_helpers():
    from slime.rollout.filter_hub.dynamic_sampling_filters import (
        check_reward_nonzero_std,
        check_reward_nonzero_std_with_fallback,
    )
    from slime.utils.mask_utils import get_response_lengths
    from slime.utils.types import Sample

    class Args:
        reward_key = None

    same = [Sample(reward=1.0), Sample(reward=1.0)]
    assert check_reward_nonzero_std(Args, [Sample(reward=0.0), Sample(reward=1.0)]).keep
    assert not check_reward_nonzero_std(Args, same).keep
    assert check_reward_nonzero_std_with_fallback(Args, same).keep_when_insufficient
    assert get_response_lengths([[0, 0, 1, 1], [0, 0]]) == [2, 0]


def test_the_plugin_module_and_sample_import_nothing_heavy():
    import subprocess
    import sys

    code = (
        "import sys, slime_compat.plugin, slime.utils.types, slime.rollout.filter_hub.base_types; "
        "print(sorted(m for m in ('torch', 'transformers', 'httpx') if m in sys.modules))"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    )


def test_dapo_compute_score_grades_the_answer_line_or_the_last_box():
    from slime.rollout.rm_hub.math_dapo_utils import compute_score

    assert compute_score("so Answer: 42", "42")["acc"] and not compute_score("so Answer: 41", "42")["acc"]
    assert compute_score("x \\boxed{42}", "42", strict_box_verify=True)["score"] == 1.0
    assert compute_score("Answer: 42", "42", strict_box_verify=True)["pred"] == "[INVALID]"


def test_should_drop_dynamic_filter_output_keeps_an_insufficient_batch_s_groups_as_slime_does():
    from slime.rollout.filter_hub.base_types import DynamicFilterOutput, should_drop_dynamic_filter_output

    def drop(output, remaining):
        return should_drop_dynamic_filter_output(output, remaining_batch_size=remaining, target_data_size=4)

    assert not drop(DynamicFilterOutput(keep=True), 9)
    assert drop(DynamicFilterOutput(keep=False), 2)  # rejected, not asking to be kept
    rescue = DynamicFilterOutput(keep=False, keep_when_insufficient=True)
    assert [drop(rescue, remaining) for remaining in (3, 4, 5)] == [False, False, True]
