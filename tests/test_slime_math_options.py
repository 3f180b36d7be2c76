"""THUDM slime's reward-normalisation options through `slime run`, and when they are warned
about as having no effect."""

import pytest

from slime_core.config import Config
from slime_core.config.no_effect import no_effect_warnings
from slime_core.rollout.debug_data import save_rollout
from slime_core.rollout.result import RolloutResult
from slime_core.sample import Sample, SampleStatus


@pytest.mark.integration
def test_reward_normalization_options_change_the_advantages_as_slime(slime_run):
    """One hand-made group replayed into training: rewards [1, 0] on responses of 3 and 1
    tokens. On-policy, the token-mean policy loss is -(3·A_0 + 1·A_1) / 4.
    --disable-grpo-std-normalization: A = r - mean = [.5, -.5], a loss of -.25 (GRPO's
    (r - mean) / std = [.707, -.707] would give -.354); --disable-rewards-normalization:
    A = r = [1, 0], a loss of -.75."""
    saved = str(slime_run.tmp_path / "dbg" / "rollout_{rollout_id}.json")
    save_rollout(
        saved,
        0,
        RolloutResult([[_sample(0, reward=1.0, response=[24, 25, 26]), _sample(1, reward=0.0, response=[24])]]),
    )
    replay = (
        "--num-rollout",
        "1",
        "--rollout-batch-size",
        "1",
        "--n-samples-per-prompt",
        "2",
        "--calculate-per-token-loss",
        "--load-debug-rollout-data",
        saved,
    )
    no_std = slime_run(*replay, "--disable-grpo-std-normalization", output="no_std")[0]
    raw = slime_run(*replay, "--disable-rewards-normalization", output="raw")[0]
    assert no_std["train/pg_loss"] == pytest.approx(-0.25, rel=1e-6)
    assert raw["train/pg_loss"] == pytest.approx(-0.75, rel=1e-6)


def test_the_options_are_warned_about_where_they_have_no_effect():
    def warned(estimator, *keys):
        values = {
            "advantage_estimator": estimator,
            "disable_rewards_normalization": False,
            "disable_grpo_std_normalization": False,
            **{key: True for key in keys},
        }
        config = Config(values, sources={key: "command line" for key in keys})
        return [line.split()[0] for line in no_effect_warnings(config)]

    assert warned("ppo", "disable_rewards_normalization", "disable_grpo_std_normalization") == [
        "--disable-rewards-normalization",
        "--disable-grpo-std-normalization",
    ]
    assert warned(
        "reinforce_plus_plus_baseline", "disable_rewards_normalization", "disable_grpo_std_normalization"
    ) == ["--disable-grpo-std-normalization"]
    assert warned("grpo", "disable_rewards_normalization", "disable_grpo_std_normalization") == [
        "--disable-grpo-std-normalization"
    ]  # nothing left to divide
    assert warned("gspo", "disable_grpo_std_normalization") == []


def _sample(index: int, reward: float, response: list[int]) -> Sample:
    """A finished sample of the tiny model (character tokenizer ids) after a 3-token prompt."""
    n = len(response)
    return Sample(
        group_index=0,
        index=index,
        prompt="1+1=",
        tokens=[20, 21, 22, *response],
        response_length=n,
        reward=reward,
        loss_mask=[1] * n,
        rollout_log_probs=[-1.0] * n,
        status=SampleStatus.COMPLETED,
    )
