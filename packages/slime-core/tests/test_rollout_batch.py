"""Train data of a rollout: from samples, split per data-parallel rank, cut into micro-batches."""

import pytest

from slime_core import Sample, SampleStatus
from slime_core.rank.micro_batches import fixed_micro_batches, step_slices, token_budget_micro_batches
from slime_core.rollout_batch import RolloutBatch, dp_rank_indices, split_by_dp_rank


def _sample(group, index, response, status=SampleStatus.COMPLETED, reward=1.0):
    sample = Sample(group_index=group, index=index, tokens=[1, 2], reward=reward, status=status)
    sample.append_response(response, log_probs=[-0.5] * len(response))
    return sample


def test_from_samples_keeps_trainable_samples_and_reduces_dict_rewards():
    samples = [
        _sample(0, 0, [3, 4], reward={"acc": 1.0}),
        _sample(0, 1, [5], status=SampleStatus.FAILED, reward=None),
        _sample(1, 0, [6, 7, 8], status=SampleStatus.TRUNCATED, reward={"acc": 0.0}),
    ]
    batch = RolloutBatch.from_samples(samples, reward_key="acc")
    assert batch.tokens == [[1, 2, 3, 4], [1, 2, 6, 7, 8]]
    assert (batch.response_lengths, batch.rewards, batch.group_ids) == ([2, 3], [1.0, 0.0], [0, 1])
    assert batch.rollout_log_probs == [[-0.5] * 2, [-0.5] * 3]


def test_teacher_log_probs_the_samples_carry_go_to_training_on_every_sample_or_none():
    from slime_core.faults.run_error import RunError
    from slime_core.rollout_batch import check_teacher_log_probs

    samples = [_sample(0, 0, [3, 4]), _sample(0, 1, [5]), _sample(1, 0, [6], status=SampleStatus.FAILED)]
    assert RolloutBatch.from_samples(samples).teacher_log_probs is None
    samples[0].teacher_log_probs = [-1.0, -2.0]
    with pytest.raises(
        ValueError,
        match=r"1 of the rollout's 2 samples carry teacher_log_probs \(on-policy distillation\) and sample 0/1 does",
    ):
        RolloutBatch.from_samples(samples)
    samples[1].teacher_log_probs = [-3.0]  # the failed sample is not trained on: it needs none
    batch = RolloutBatch.from_samples(samples)
    assert batch.teacher_log_probs == [[-1.0, -2.0], [-3.0]]
    assert batch.select([1]).teacher_log_probs == [[-3.0]]

    class Config(dict):
        """The options the check reads (``config.get`` and attributes)."""

        def __getattr__(self, name):
            return self[name]

        def get(self, name, default=None):
            return super().get(name, default)

    check_teacher_log_probs(batch, Config(opd_kl_coef=1.0))
    with pytest.raises(RunError, match="--opd-kl-coef is 0, so they would not be trained on"):
        check_teacher_log_probs(batch, Config(opd_kl_coef=0.0))
    with pytest.raises(RunError, match="--opd-teacher-load teacher-dir names a teacher for the train ranks too"):
        check_teacher_log_probs(batch, Config(opd_kl_coef=1.0, opd_teacher_load="teacher-dir"))
    samples[0].teacher_log_probs = [-1.0]
    with pytest.raises(ValueError, match="teacher_log_probs has 1 entries for 2 response tokens"):
        RolloutBatch.from_samples(samples)


def test_split_keeps_groups_whole_and_balances_tokens():
    batch = RolloutBatch()
    sizes = {0: 40, 1: 10, 2: 25, 3: 25, 4: 5, 5: 15}  # tokens per sample of each group
    for group, size in sizes.items():
        for _ in range(2):
            batch.tokens.append([0] * size)
            batch.group_ids.append(group)
    for field in ("response_lengths", "loss_masks", "rewards", "rollout_log_probs"):
        setattr(batch, field, [0] * len(batch))
    shares = dp_rank_indices(batch, 2)
    assert sorted(i for share in shares for i in share) == list(range(len(batch)))
    for share in shares:
        groups = {batch.group_ids[i] for i in share}
        assert all(sum(batch.group_ids[i] == g for i in share) == 2 for g in groups)
    loads = [sum(len(batch.tokens[i]) for i in share) for share in shares]
    assert abs(loads[0] - loads[1]) <= 10  # 240 tokens in all: 120 / 120 is reachable, LPT gets within 10
    assert [len(b) for b in split_by_dp_rank(batch, 2)] == [len(s) for s in shares]
    with pytest.raises(ValueError, match="6 prompt groups cannot feed 8 data-parallel ranks"):
        dp_rank_indices(batch, 8)


def test_steps_and_micro_batches():
    assert step_slices(5, 2) == [[0, 1, 2], [3, 4]]
    with pytest.raises(ValueError, match="3 samples on this rank cannot make 4 optimizer steps"):
        step_slices(3, 4)
    assert fixed_micro_batches([4, 5, 6, 7, 8], 2) == [[4, 5], [6, 7], [8]]
    lengths = [7, 3, 5, 2, 6]
    plan = token_budget_micro_batches([0, 1, 2, 3, 4], lengths, max_tokens=10)
    assert sorted(i for mb in plan for i in mb) == [0, 1, 2, 3, 4]
    assert all(sum(lengths[i] for i in mb) <= 10 for mb in plan) and len(plan) == 3  # 23 tokens: 3 is optimal
    # one right-padded row per sample: rows × the longest sample within the budget
    lengths = [9, 2, 2, 2, 2, 5]
    plan = token_budget_micro_batches(list(range(6)), lengths, max_tokens=10, padded_rows=True)
    assert sorted(i for mb in plan for i in mb) == list(range(6))
    assert all(len(mb) * max(lengths[i] for i in mb) <= 10 for mb in plan)
    assert plan == [[0], [1, 5], [2, 3, 4]]
    assert [1, 2, 5] in token_budget_micro_batches(
        list(range(6)), lengths, max_tokens=10
    )  # 9 real tokens, 3 × 5 padded
