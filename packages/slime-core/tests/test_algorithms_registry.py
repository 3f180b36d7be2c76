"""The RL math is reachable by name through the plugin registries, as backends look it up."""

from types import SimpleNamespace

import pytest
import torch

from slime_core.algorithms import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, AdvantageInputs, PolicyLossConfig, sft_loss
from slime_core.algorithms.reduce import loss_denominators, reduce_loss


def test_every_builtin_estimator_and_loss_is_registered_by_the_core_plugin(plugins):
    estimators, losses = plugins.registry("advantage_estimators"), plugins.registry("policy_losses")
    core = lambda registry: [name for name in registry.names() if registry.entry(name).plugin == "core"]  # noqa: E731
    assert core(estimators) == sorted(ADVANTAGE_ESTIMATORS)  # (installed plugins, slime-compat's, add theirs)
    assert core(losses) == sorted(POLICY_LOSSES)
    for name, fn in ADVANTAGE_ESTIMATORS.items():
        assert estimators.get(name) is fn and estimators.entry(name).plugin == "core"
    for name, fn in POLICY_LOSSES.items():
        assert losses.get(name) is fn


def test_registered_grpo_normalises_within_groups(plugins):
    grpo = plugins.registry("advantage_estimators").get("grpo")
    inputs = AdvantageInputs(torch.tensor([1.0, 0.0, 3.0, 3.0]), torch.tensor([0, 0, 1, 1]), torch.ones(4, 2))
    advantages, _ = grpo(inputs)
    assert advantages[:2, 0].tolist() == pytest.approx([2**-0.5, -(2**-0.5)], rel=1e-4)
    assert advantages[2:].abs().max() == 0


@pytest.mark.parametrize(
    ("estimator", "loss_type", "expected"),
    [
        ("grpo", "policy_loss", "policy_loss"),
        ("gspo", "policy_loss", "gspo"),
        ("cispo", "policy_loss", "cispo"),
        ("gspo", "ppo", "ppo"),
        ("grpo", "sft_loss", "sft_loss"),
    ],
)
def test_the_default_loss_follows_the_estimator_as_in_slime(estimator, loss_type, expected):
    config = PolicyLossConfig.from_config(
        SimpleNamespace(advantage_estimator=estimator, loss_type=loss_type, eps_clip=0.2)
    )
    assert config.loss_type == expected


def test_sft_loss_type_is_the_sft_loss():
    log_probs = torch.tensor([[-1.0, -2.0], [-3.0, -50.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    per_token, clipfrac = POLICY_LOSSES["sft_loss"](log_probs, log_probs, torch.zeros(2, 2), mask, None)
    denominators = loss_denominators(mask)
    assert reduce_loss(per_token, mask, denominators).item() == pytest.approx(
        sft_loss(log_probs, mask, denominators)[0].item()
    )
    assert clipfrac.abs().sum() == 0
