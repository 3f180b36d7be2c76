"""The plugin points of the RL math: TIS functions (``--tis-mode NAME``), pg-loss reducers
(``--pg-loss-reducer NAME``) and estimators that need π_old, checked against hand-computed
losses, directly and through a train rank's `RankStep` (which loads a ``-p`` plugin)."""

import sys
import textwrap

import pytest
import torch

from slime_core.algorithms import (
    TIS_FUNCTIONS,
    PolicyLossConfig,
    PolicyLossInputs,
    compute_policy_loss,
    loss_denominators,
)

MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ADVANTAGES = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, 0.0]])  # on-policy: per-token pg loss = -A


PLUGIN = '''
    import torch
    from slime_core import hookimpl

    def half_and_reject_last(pg_loss, inputs, config):
        """A TIS function: weights of 0.5, and sample 0's third token rejected."""
        mask = inputs.loss_mask.clone()
        mask[0, 2] = 0.0
        return pg_loss * 0.5, mask, {"half": torch.full_like(pg_loss, 0.5)}

    def token_sum(pg_loss, loss_mask, inputs, denominators, config):
        """A pg-loss reducer: the masked token sum over the global batch's samples."""
        return (pg_loss * loss_mask).sum() / denominators.num_samples

    def scaled_rewards(inputs):
        """Each sample's reward times the run's --my-scale on every trained token."""
        advantages = inputs.rewards[:, None] * inputs.loss_mask * inputs.run_config.my_scale
        return advantages, advantages

    scaled_rewards.needs_old_log_probs = True

    @hookimpl
    def slime_register_advantage_estimators(register):
        register("scaled", scaled_rewards)

    @hookimpl
    def slime_register_tis_functions(register):
        register("half", half_and_reject_last)

    @hookimpl
    def slime_register_pg_loss_reducers(register):
        register("token_sum", token_sum)
'''


@pytest.fixture
def math_plugin(tmp_path, monkeypatch):
    """The plugin above as a ``-p`` module, which train ranks load too (``SLIME_PLUGINS``)."""
    import importlib

    (tmp_path / "math_plugin.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SLIME_PLUGINS", "math_plugin")
    monkeypatch.delitem(sys.modules, "math_plugin", raising=False)
    return importlib.import_module("math_plugin")


def _inputs(**kwargs) -> PolicyLossInputs:
    log_probs = torch.full((2, 3), -1.0, requires_grad=True)
    return PolicyLossInputs(
        log_probs, log_probs.detach(), ADVANTAGES, MASK, rollout_log_probs=torch.full((2, 3), -1.0), **kwargs
    )


def test_a_tis_function_rewrites_the_pg_loss_and_rejects_tokens_but_not_their_denominators(math_plugin):
    loss, metrics = compute_policy_loss(
        _inputs(), PolicyLossConfig(use_tis=True), loss_denominators(MASK), tis_fn=math_plugin.half_and_reject_last
    )
    # sample 0: (-0.5 - 0.5 + rejected) / 3 tokens; sample 1: (1 + 1) / 2; mean of the two samples
    assert metrics["pg_loss"] == pytest.approx((-1 / 3 + 1) / 2) and loss.item() == pytest.approx(1 / 3)
    assert metrics["half"] == pytest.approx(0.5)  # per-token metrics reduced like the loss
    _, report_only = compute_policy_loss(
        _inputs(),
        PolicyLossConfig(get_mismatch_metrics=True),
        loss_denominators(MASK),
        tis_fn=math_plugin.half_and_reject_last,
    )
    assert report_only["pg_loss"] == pytest.approx((-1 + 2) / 2) and report_only["half"] == pytest.approx(0.5)


def test_a_pg_loss_reducer_reduces_the_pg_term_alone(math_plugin):
    config = PolicyLossConfig(use_tis=True, entropy_coef=0.1)
    loss, metrics = compute_policy_loss(
        _inputs(entropy=torch.ones(2, 3)),
        config,
        loss_denominators(MASK),
        tis_fn=math_plugin.half_and_reject_last,
        pg_loss_reducer=math_plugin.token_sum,
    )
    assert metrics["pg_loss"] == pytest.approx((-0.5 - 0.5 + 1 + 1) / 2)  # the TIS mask, summed, over 2 samples
    assert metrics["entropy"] == pytest.approx(1.0) and loss.item() == pytest.approx(0.5 - 0.1)


def test_the_builtin_tis_functions_are_registered_by_name(plugins):
    registry = plugins.registry("tis_functions")
    assert {name: registry.get(name) for name in TIS_FUNCTIONS} == TIS_FUNCTIONS
    assert {registry.entry(name).plugin for name in TIS_FUNCTIONS} == {"core"}
    weights = torch.exp(torch.tensor([[0.5, -0.5, 0.0], [2.0, 0.0, 0.0]]))  # π_old / π_rollout
    inputs = _inputs()
    inputs.rollout_log_probs = inputs.old_log_probs - weights.log()
    pg = -ADVANTAGES * MASK
    truncated, mask, metrics = TIS_FUNCTIONS["truncate"](pg, inputs, PolicyLossConfig(tis_clip=1.5))
    assert torch.allclose(truncated, pg * weights.clamp(max=1.5)) and torch.equal(mask, MASK)
    dropped, _, _ = TIS_FUNCTIONS["icepop"](pg, inputs, PolicyLossConfig(tis_clip=1.5, tis_clip_low=0.7))
    assert torch.allclose(dropped, pg * torch.where((weights < 0.7) | (weights > 1.5), 0.0, weights))
    assert set(metrics) == {"tis_weight", "tis_clipfrac", "tis_rollout_kl"}


class _Config:
    """What a rank's `Config` gives `RankStep`, with the plugin's option ``my_scale``."""

    advantage_estimator, loss_type, tis_mode, pg_loss_reducer, use_tis = (
        "scaled",
        "policy_loss",
        "half",
        "token_sum",
        True,
    )
    kl_coef, kl_loss_type, gamma, lambd, opd_kl_coef, my_scale = 0.0, "low_var_kl", 1.0, 1.0, 0.0, 2.0
    normalize_advantages = disable_rewards_normalization = disable_grpo_std_normalization = False
    num_steps_per_rollout = 1  # on-policy: only the estimator's mark asks for π_old up front

    def get(self, name, default=None):
        return getattr(self, name, default)


def test_a_rank_step_selects_the_plugins_by_name(math_plugin):
    from slime_core.rank.step import RankStep
    from slime_core.rollout_batch import RolloutBatch

    batch = RolloutBatch(
        tokens=[[7, 8, 9, 9, 9], [7, 8, 9, 9]],
        response_lengths=[3, 2],
        loss_masks=[[1, 1, 1], [1, 1]],
        rewards=[0.5, -1.0],
        group_ids=[0, 0],
        rollout_log_probs=[[-1.0] * 3, [-1.0] * 2],
    )
    asked = []
    step = RankStep(_Config())
    data = step.tensors(
        batch,
        lambda model: asked.append(model) or [torch.full((n,), -1.0) for n in (3, 2)],
        reference=False,
        teacher=False,
    )
    assert asked == ["actor"] and not data.old_from_forward  # π_old computed before the step
    assert torch.equal(data.advantages, ADVANTAGES)  # rewards × my_scale
    assert data.total_lengths.tolist() == [5, 4] and data.response_lengths.tolist() == [3, 2]
    inputs = data.loss_inputs([0, 1], data.old.clone().requires_grad_(), None)
    _, metrics = step.loss(inputs, loss_denominators(MASK))
    assert metrics["pg_loss"] == pytest.approx(1.0 / 2) and metrics["half"] == pytest.approx(0.5)
