"""One real ``slime run`` (fake backends from the repository's tests/, in this process, no Ray)
whose generate function, reward and dynamic-sampling filter are slime-style functions named
with slime's flags."""

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[3] / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

P = "slime_style_plugins."


def test_slime_functions_run_through_the_real_loop(tiny_model_dir, tmp_path, calls):
    from fake_backends import FakeBackendsPlugin
    from slime.utils.types import Sample
    from slime_core.cli.run import run_command
    from slime_core.loop.run_dir import read_metrics
    from slime_core.plugins import Plugins

    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(f'{{"prompt": "{i}+1=", "label": "{i + 1}"}}\n' for i in range(8)))
    plugins = Plugins()
    plugins.register_object("fake_backends", FakeBackendsPlugin)
    try:
        code = run_command(["--actor-runtime", "inprocess", "--train-backend", "fake", "--rollout-backend", "fake",
                            "--router", "fake", "--prompt-data", str(data), "--hf-checkpoint", str(tiny_model_dir),
                            "--rollout-batch-size", "2", "--n-samples-per-prompt", "2", "--rollout-max-response-len", "4",
                            "--num-rollout", "2", "--output-dir", str(tmp_path / "run"),
                            "--custom-generate-function-path", P + "digits_generate",
                            "--custom-rm-path", P + "digit_reward",
                            "--dynamic-sampling-filter-path", P + "keep_mixed"], plugins)
    finally:
        plugins.unregister("fake_backends")
    assert code == 0
    records = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["rollout_id"] >= 0]
    assert [r["rollout/reward_mean"] for r in records] == [0.5, 0.5]  # "7" scores 1, "x" scores 0
    assert len(calls["generate"]) == len(calls["rm"]) == 2 * 2 * 2
    assert calls["generate"][0] == ("router", 4, False)  # args.sglang_router_ip from the run's router address
    assert {seen[0] for seen in calls["rm"]} == {Sample} and len(calls["filter"]) == 4
