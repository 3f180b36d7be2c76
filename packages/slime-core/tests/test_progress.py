"""The console line printed after every rollout."""

from slime_core.loop.progress import Progress

METRICS = {
    "rollout/reward_mean": 0.75,
    "rollout/response_length_mean": 3.0,
    "train/loss": 0.5,
    "perf/step_seconds": 0.5,
    "perf/tokens_per_second": 1000.0,
    "eval/addition/reward_mean": 0.9,
}


def test_the_line_shows_reward_length_loss_speed_and_evals():
    line = Progress(0, 10).line(4, METRICS)
    assert line.startswith("[rollout 5/10]  reward 0.750  len 3.0  loss 0.5000  0.50 s/step  1,000 tok/s  ETA ")
    assert line.endswith("addition/reward_mean 0.900")


def test_a_supervised_run_shows_no_reward():
    line = Progress(0, 10, show_reward=False).line(4, {**METRICS, "rollout/reward_mean": 0.0})
    assert "reward 0.000" not in line and line.startswith("[rollout 5/10]  len 3.0  loss 0.5000")


def test_a_critic_only_rollout_shows_the_value_loss_and_no_policy_loss():
    metrics = {key: v for key, v in METRICS.items() if key != "train/loss"} | {"critic/value_loss": 0.25}
    line = Progress(0, 10).line(0, metrics)
    assert "nan" not in line and "  loss " not in line
    assert line.startswith("[rollout 1/10]  reward 0.750  len 3.0  value loss 0.2500 (critic only)  0.50 s/step")
