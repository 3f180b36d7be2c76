"""A distillation teacher's log-probs on the FSDP rank ignore ``--rollout-temperature``, as SGLang's
prompt log-probs do for slime's OPD reward (`slime_core.testing.check_teacher_temperature`)."""

import pytest

from slime_core.testing import check_teacher_temperature, destroy_default_group
from slime_fsdp.rank import FSDPTrainRank

pytestmark = pytest.mark.integration


def test_the_teacher_scores_at_temperature_1_and_the_actor_at_the_rollout_s(prompt_file, tmp_path):
    check_teacher_temperature(FSDPTrainRank, destroy_default_group, prompt_file, tmp_path, train_backend="fsdp")
