"""slime's train-side math flags (custom advantage, TIS function, pg-loss reducer) on a train
rank's `RankStep`, with slime-style functions (below, named by dotted path as in a launch
script), against hand-computed advantages and losses.

The batch: one group of two samples, responses of 3 and 2 tokens after a 2-token prompt,
on-policy (π = π_old = π_rollout), so the per-token pg loss is -A."""

import pytest
import torch

from slime_core.algorithms import loss_denominators
from slime_core.rank.step import RankStep
from slime_core.rollout_batch import RolloutBatch

HERE = "test_train_hooks."


# ------------------------------------------------------------ slime-style user functions


def reward_advantages(args, rollout_data):
    """Advantage = the (post-processed) reward on every token; returns = advantage + 1."""
    assert args.custom_advantage_function_path == HERE + "reward_advantages"
    assert [len(kl) for kl in rollout_data["kl"]] == rollout_data["response_lengths"] == [3, 2]
    assert rollout_data["total_lengths"] == [5, 4] and len(rollout_data["log_probs"]) == 2
    rollout_data["advantages"] = [torch.full((n,), r) for r, n in zip(rollout_data["rewards"], [3, 2])]
    rollout_data["returns"] = [a + 1 for a in rollout_data["advantages"]]


def forgetful_advantages(args, rollout_data):
    rollout_data["advantages"] = []


def half_tis(
    args, *, pg_loss, train_log_probs, rollout_log_probs, loss_masks, total_lengths, response_lengths, **kwargs
):
    """Weights of 0.5, and the first sample's last token rejected (slime's 'RS')."""
    assert args.use_tis and response_lengths == [3, 2] and total_lengths == [5, 4]
    assert pg_loss.shape == (5,) and [len(lp) for lp in train_log_probs] == [len(lp) for lp in rollout_log_probs] == [
        3,
        2,
    ]
    masks = [mask.clone() for mask in loss_masks]
    masks[0][2] = 0
    return pg_loss * 0.5, masks, {"half": torch.full_like(pg_loss, 0.5)}


def constant_reducer(total_lengths, response_lengths, loss_masks, calculate_per_token_loss):
    """Dr.GRPO's reducer: each sample's masked sum over a constant 4 tokens."""

    def reduce(x):
        return sum((part * mask).sum() / 4 for part, mask in zip(x.split(response_lengths), loss_masks))

    return reduce


def sample_mean_reducer(total_lengths, response_lengths, loss_masks, calculate_per_token_loss):
    """slime's default reducer (each sample's masked mean, summed)."""

    def reduce(x):
        return sum(
            (part * mask).sum() / mask.sum().clamp(min=1) for part, mask in zip(x.split(response_lengths), loss_masks)
        )

    return reduce


# ------------------------------------------------------------ tests


def _batch(rewards=(1.0, -2.0)) -> RolloutBatch:
    return RolloutBatch(
        tokens=[[7, 8, 9, 9, 9], [7, 8, 9, 9]],
        response_lengths=[3, 2],
        loss_masks=[[1, 1, 1], [1, 1]],
        rewards=list(rewards),
        group_ids=[0, 0],
        rollout_log_probs=[[-1.0] * 3, [-1.0] * 2],
    )


def _pg_loss(config, batch=None) -> dict[str, float]:
    """The rank's loss metrics of the batch in one on-policy micro-batch."""
    batch = batch or _batch()
    step = RankStep(config)
    data = step.tensors(batch, lambda model: [torch.full((n,), -1.0) for n in (3, 2)], reference=False, teacher=False)
    inputs = data.loss_inputs([0, 1], torch.full((2, 3), -1.0, requires_grad=True), None)
    return step.loss(inputs, loss_denominators(data.mask))[1]


def _advantages(config) -> torch.Tensor:
    return (
        RankStep(config)
        .tensors(
            _batch((1.0, 0.0)), lambda model: [torch.full((n,), -1.0) for n in (3, 2)], reference=False, teacher=False
        )
        .advantages
    )


def test_the_custom_advantage_gets_grpo_normalised_rewards_and_sets_the_advantages(make_config):
    config, _ = make_config("--custom-advantage-function-path", HERE + "reward_advantages")
    assert config.advantage_estimator == "slime.custom_advantage"
    a = 0.5 / (0.5**0.5 + 1e-6)  # rewards [1, 0]: (r - mean) / (unbiased std + 1e-6), as slime's post-processing
    assert torch.allclose(_advantages(config), torch.tensor([[a, a, a], [-a, -a, 0.0]]))


@pytest.mark.parametrize(
    ("estimator", "rewards", "loss_type"),
    [
        ("reinforce_plus_plus", [1.0, 0.0], "policy_loss"),  # slime normalises no reward for it
        ("reinforce_plus_plus_baseline", [0.5, -0.5], "policy_loss"),  # centred, not divided by the std
        ("gspo", None, "gspo"),  # normalised as grpo, and gspo's loss
    ],
)
def test_the_estimator_name_keeps_its_slime_meaning(make_config, estimator, rewards, loss_type):
    config, _ = make_config(
        "--custom-advantage-function-path", HERE + "reward_advantages", "--advantage-estimator", estimator
    )
    assert config.loss_type == loss_type
    if rewards:
        assert _advantages(config)[:, 0].tolist() == pytest.approx(rewards)


def test_the_custom_advantage_is_refused_with_ppo_and_checked(make_config):
    from slime_core.config import ConfigError

    with pytest.raises(ConfigError, match="critic's values"):
        make_config("--custom-advantage-function-path", HERE + "reward_advantages", "--advantage-estimator", "ppo")
    config, _ = make_config("--custom-advantage-function-path", HERE + "forgetful_advantages")
    with pytest.raises(ValueError, match=r"must set rollout_data\['advantages'\] to one tensor per sample \(2 here\)"):
        _advantages(config)


def test_the_custom_tis_function_rewrites_the_pg_loss(make_config, capsys):
    config, plugins = make_config(
        "--custom-tis-function-path", HERE + "half_tis", "--use-tis", "--disable-rewards-normalization"
    )
    metrics = _pg_loss(config)  # A = [1, -2]; per-token pg loss [-1, -1, -1], [2, 2]
    # halved, the first sample's last token rejected but still in its denominator: ((-1/3) + 1) / 2 samples
    assert metrics["pg_loss"] == pytest.approx((-1 / 3 + 1) / 2) and metrics["half"] == pytest.approx(0.5)
    make_config("--custom-tis-function-path", HERE + "half_tis")
    assert "has no effect here: slime calls it with --use-tis" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("reducer", "expected"),
    [
        ("constant_reducer", (-3 / 4 + 4 / 4) / 2),  # each sample's sum over 4 tokens, over the 2 samples
        ("sample_mean_reducer", (-1 + 2) / 2),  # slime's default: the same as ours
    ],
)
def test_the_custom_pg_loss_reducer_reduces_the_pg_loss(make_config, reducer, expected):
    config, _ = make_config(
        "--custom-pg-loss-reducer-function-path",
        HERE + reducer,
        "--disable-rewards-normalization",
        "--entropy-coef",
        "0",
    )
    assert config.pg_loss_reducer == "slime.custom_pg_loss_reducer"
    assert _pg_loss(config)["pg_loss"] == pytest.approx(expected)


def test_the_reducer_gets_the_tis_functions_masks(make_config):
    config, _ = make_config(
        "--custom-pg-loss-reducer-function-path",
        HERE + "constant_reducer",
        "--custom-tis-function-path",
        HERE + "half_tis",
        "--use-tis",
        "--disable-rewards-normalization",
    )
    assert _pg_loss(config)["pg_loss"] == pytest.approx((-0.5 * 2 / 4 + 0.5 * 4 / 4) / 2)


def test_slime_s_mis_yaml_sets_the_tis_function_s_arguments_beside_its_flag(make_config, tmp_path):
    """slime's train_infer_mismatch_helper/mis.yaml repeats --use-tis and sets tis_mode, an argument of
    its TIS function: accepted, the function reads args.tis_mode, our option keeps the adapter."""
    from slime_compat.args import slime_args

    extra = tmp_path / "mis.yaml"
    extra.write_text('use_tis: true\ntis_mode: "truncate"\ntis_lower_bound: 0.5\n')
    config, _ = make_config(
        "--custom-tis-function-path", HERE + "half_tis", "--use-tis", "--custom-config-path", str(extra)
    )
    assert config.tis_mode == "slime.custom_tis"
    args = slime_args(config)
    assert (args.tis_mode, args.tis_lower_bound, args.use_tis) == ("truncate", 0.5, True)
