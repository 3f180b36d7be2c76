"""A distillation teacher's log-probs on the Megatron rank ignore ``--rollout-temperature``, as
SGLang's prompt log-probs do for slime's OPD reward (`slime_core.testing.check_teacher_temperature`)."""

import json

import pytest

from slime_core.testing import check_teacher_temperature
from slime_megatron.parallel import destroy_parallel
from slime_megatron.rank import MegatronTrainRank

pytestmark = pytest.mark.integration


def test_the_teacher_scores_at_temperature_1_and_the_actor_at_the_rollout_s(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    check_teacher_temperature(MegatronTrainRank, destroy_parallel, prompts, tmp_path, train_backend="megatron")
