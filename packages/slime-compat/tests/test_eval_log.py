"""slime's eval log function (``--custom-eval-rollout-log-function-path``), written in slime's
style below and named by dotted path, through the real loop with the in-process fake backends
and the default eval function (whose scored groups reach the native ``slime_log_eval`` hook)."""

import importlib

import pytest

HERE = "test_eval_log."  # this module, as a launch script names its functions
P = "slime_style_plugins."

SEEN: list = []  # (rollout_id, what data held, extra_metrics) per call, in the module instance slime-compat loads


def _record(rollout_id, args, data, extra_metrics) -> None:
    summary = {
        name: (
            entry["rewards"],
            entry["truncated"],
            [type(s).__name__ for s in entry["samples"]],
            [s.response for s in entry["samples"]],
        )
        for name, entry in data.items()
    }
    SEEN.append((rollout_id, args.n_samples_per_eval_prompt, summary, dict(extra_metrics)))


def log_and_skip(rollout_id, args, data, extra_metrics) -> bool:
    _record(rollout_id, args, data, extra_metrics)
    return True


def log_and_keep(rollout_id, args, data, extra_metrics) -> bool:
    _record(rollout_id, args, data, extra_metrics)
    return False


@pytest.fixture
def seen():
    module = importlib.import_module(HERE[:-1])
    module.SEEN.clear()
    return module.SEEN


@pytest.mark.parametrize("skip", [True, False])
def test_the_eval_log_function_gets_each_dataset_s_rewards_and_samples_and_true_drops_the_eval_metrics(
    digits_loop, tmp_path, seen, skip
):
    evals = tmp_path / "eval.jsonl"
    evals.write_text("".join(f'{{"prompt": "{i}*2=", "label": "{2 * i}"}}\n' for i in range(3)))
    records, _ = digits_loop(
        "--custom-rm-path",
        P + "digit_reward",
        "--eval-prompt-data",
        "doubles",
        str(evals),
        "--eval-interval",
        "1",
        "--n-samples-per-eval-prompt",
        "2",
        "--custom-eval-rollout-log-function-path",
        HERE + ("log_and_skip" if skip else "log_and_keep"),
    )
    assert [call[0] for call in seen] == [-1, 0, 1]  # before training, then after each of the 2 rollouts
    for _, n, data, extra in seen:
        # 3 prompts × 2 samples, flat in prompt order: "7" (reward 1) then "x" (reward 0) each
        assert n == 2 and data == {"doubles": ([1.0, 0.0] * 3, [False] * 6, ["Sample"] * 6, ["7", "x"] * 3)}
        assert extra["eval/doubles/reward_mean"] == 0.5 and extra["eval/doubles/pass@2"] == 1.0
    for record in records:
        assert "time/eval" in record  # logged in any case
        assert ("eval/doubles/reward_mean" in record) is not skip


def two_prompt_eval(args, rollout_id, data_source, evaluation=False):
    """slime's eval output with its samples: two prompts of two samples, flat."""
    from slime.rollout.base_types import RolloutFnEvalOutput
    from slime.utils.types import Sample

    samples = [Sample(group_index=g, index=i, response=str(i), reward=float(i)) for g in range(2) for i in range(2)]
    return RolloutFnEvalOutput(data={"toy": {"rewards": [0.0, 1.0, 0.0, 1.0], "samples": samples}})


def test_a_slime_eval_function_s_samples_become_the_groups_the_eval_log_reads(make_config):
    import asyncio

    from test_hooks import _parts

    config, plugins = make_config("--eval-function-path", HERE + "two_prompt_eval")
    result = asyncio.run(plugins.registry("eval_functions").get(config.eval_function)(config, _parts([]), {}))
    assert result.metrics == {"eval/toy": 0.5}
    assert [[(s.group_index, s.response) for s in group] for group in result.groups["toy"]] == [
        [(0, "0"), (0, "1")],
        [(1, "0"), (1, "1")],
    ]
