import torch

from slime_core.algorithms import opd_advantages


def test_opd_subtracts_the_scaled_student_teacher_log_ratio_on_valid_tokens():
    advantages = torch.tensor([[1.0, 1.0, 0.0]])
    log_probs = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    teacher = torch.tensor([[-1.5, -1.0, 0.0]])
    got = opd_advantages(advantages, log_probs, teacher, torch.tensor([[1.0, 1.0, 0.0]]), opd_kl_coef=0.5)
    # 1 - .5·(-1 + 1.5) = .75;  1 - .5·(-2 + 1) = 1.5;  masked -> 0
    assert torch.allclose(got, torch.tensor([[0.75, 1.5, 0.0]]))
    assert not got.requires_grad
