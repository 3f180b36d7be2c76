"""``--ref-load`` as a Megatron checkpoint with the FSDP backend: converted on the fly by
slime-megatron, it gives the reference log-probs of the same model as a Hugging Face
directory, and, as in slime, the policy's starting weights while --load holds none. Without
slime-megatron the run is refused at config time with the fix."""

import sys

import pytest

from slime_core.cli.main import main
from slime_core.rank.processes import spawn_ranks
from slime_core.testing import actor_and_reference_log_probs, destroy_default_group, make_config


@pytest.fixture(scope="module")
def reference(tiny_model_dir, tmp_path_factory):
    """The tiny model with every weight perturbed: a Hugging Face directory and its Megatron
    checkpoint (``slime convert hf-to-megatron``)."""
    from slime_core.tools.tiny_models import perturbed_copy

    root = tmp_path_factory.mktemp("reference")
    perturbed_copy(tiny_model_dir, root / "hf")
    assert main(["convert", "hf-to-megatron", "--hf", str(root / "hf"), "--out", str(root / "megatron")]) == 0
    return root


@pytest.fixture
def config_with(prompt_file, tiny_model_dir):
    def build(ref_load, **overrides):
        return make_config(
            prompt_file,
            tiny_model_dir,
            train_backend="fsdp",
            rollout_batch_size=4,
            n_samples_per_prompt=4,
            rollout_max_response_len=8,
            use_kl_loss=True,
            ref_load=str(ref_load),
            **overrides,
        )

    return build


def _log_probs(rank, world_size, port, configs):
    """Per config: (actor, reference) log-probs of one rollout batch on a fresh FSDP rank."""
    from slime_fsdp.rank import FSDPTrainRank

    return actor_and_reference_log_probs(FSDPTrainRank, destroy_default_group, rank, world_size, port, configs)


def test_a_megatron_ref_load_gives_the_reference_and_the_starting_weights(reference, config_with):
    configs = [config_with(reference / "hf"), config_with(reference / "megatron")]
    (actor, ref_from_hf), (start_from_megatron, ref_from_megatron) = spawn_ranks(_log_probs, 1, configs)[0]
    assert ref_from_megatron == ref_from_hf
    assert ref_from_hf != actor  # the reference is another model than --hf-checkpoint's
    assert start_from_megatron == ref_from_megatron  # as in slime: the policy starts from --ref-load


def test_without_slime_megatron_a_megatron_ref_load_is_a_config_error_with_the_fix(reference, config_with, monkeypatch):
    from slime_fsdp.plugin import slime_validate_config

    config = config_with(reference / "megatron")
    assert slime_validate_config(config) == []
    monkeypatch.setitem(sys.modules, "slime_megatron", None)  # as if not installed
    (error,) = slime_validate_config(config)
    assert "is a Megatron checkpoint" in error and "pip install slime-megatron" in error
    assert f"slime convert megatron-to-hf --load {reference / 'megatron'}" in error


def test_a_ref_load_of_neither_layout_is_reported_with_both(tmp_path, config_with, tiny_model_dir):
    from slime_core.preflight import model_dir_problems

    (tmp_path / "empty").mkdir()
    (problem,) = model_dir_problems(config_with(tmp_path / "empty"))
    assert problem.startswith(
        f"--ref-load {tmp_path / 'empty'}: has no config.json and no latest_checkpointed_iteration.txt"
    )
    assert "a Hugging Face model directory" in problem and "a Megatron checkpoint directory" in problem
    (problem,) = model_dir_problems(config_with(tmp_path / "missing"))
    assert "no such directory" in problem and "a Megatron checkpoint directory" in problem
    assert model_dir_problems(config_with(tiny_model_dir)) == []
    (tmp_path / "empty" / "latest_checkpointed_iteration.txt").write_text("3")
    (problem,) = model_dir_problems(config_with(tmp_path / "empty"))
    assert "names iter_0000003, which holds no torch_dist checkpoint" in problem
