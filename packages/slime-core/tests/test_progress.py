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
