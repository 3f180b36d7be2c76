"""``slime convert`` both ways on disk: a Hugging Face MoE model to an expert-parallel
Megatron checkpoint (two spawned ranks) and back (one rank) gives identical tensors."""

import json

import pytest
import torch
from safetensors.torch import load_file

from slime_core.cli.main import main
from slime_core.testing import PicklePayload
from slime_core.tools.tiny_models import build_char_tokenizer

pytestmark = pytest.mark.integration


def test_hf_to_megatron_to_hf_on_disk_gives_back_identical_tensors(tiny_hf, tmp_path):
    hf_dir, checkpoint, back = tmp_path / "hf", tmp_path / "megatron", tmp_path / "back"
    tiny_hf.model("qwen3_moe").save_pretrained(hf_dir)
    build_char_tokenizer(hf_dir)

    assert (
        main(
            [
                "convert",
                "hf-to-megatron",
                "--hf",
                str(hf_dir),
                "--out",
                str(checkpoint),
                "--expert-model-parallel-size",
                "2",
            ]
        )
        == 0
    )
    assert (checkpoint / "latest_checkpointed_iteration.txt").read_text() == "0"
    meta = json.loads((checkpoint / "iter_0000000" / "slime.json").read_text())
    assert meta == {"rollout_id": 0, "has_optimizer": False, "world_size": 2}

    assert (
        main(["convert", "megatron-to-hf", "--load", str(checkpoint), "--hf-config", str(hf_dir), "--out", str(back)])
        == 0
    )
    original, converted = load_file(hf_dir / "model.safetensors"), load_file(back / "model.safetensors")
    assert sorted(converted) == sorted(original)
    assert all(torch.equal(converted[name], original[name]) for name in original)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (back / name).read_bytes() == (hf_dir / name).read_bytes()


def test_megatron_to_hf_without_a_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="the directory does not exist"):
        main(
            [
                "convert",
                "megatron-to-hf",
                "--load",
                str(tmp_path / "nope"),
                "--hf-config",
                str(tmp_path),
                "--out",
                str(tmp_path / "out"),
            ]
        )


def test_a_megatron_checkpoint_whose_metadata_carries_a_payload_is_refused_unrun(tiny_hf, tmp_path):
    """The ``.metadata`` of a Megatron checkpoint (what slime's launch scripts give as
    ``--ref-load``; `slime convert megatron-to-hf` and both backends read it with
    `slime_megatron.torch_dist`) is read with an allow-list: a payload in it is refused,
    naming the file and the type, and never runs."""
    import pickle

    from slime_core.checkpoint.safety import UnsafeCheckpointError

    hf_dir, checkpoint, marker = tmp_path / "hf", tmp_path / "megatron", tmp_path / "payload-ran"
    tiny_hf.model("qwen3").save_pretrained(hf_dir)
    build_char_tokenizer(hf_dir)
    assert main(["convert", "hf-to-megatron", "--hf", str(hf_dir), "--out", str(checkpoint)]) == 0
    metadata_file = checkpoint / "iter_0000000" / ".metadata"
    metadata = pickle.loads(metadata_file.read_bytes())
    metadata.planner_data = PicklePayload(marker)
    metadata_file.write_bytes(pickle.dumps(metadata))
    try:
        with pytest.raises(UnsafeCheckpointError, match=f"{metadata_file}: refused to load it: it names posix.system"):
            main(
                [
                    "convert",
                    "megatron-to-hf",
                    "--load",
                    str(checkpoint),
                    "--hf-config",
                    str(hf_dir),
                    "--out",
                    str(tmp_path / "back"),
                ]
            )
    finally:
        assert not marker.exists(), "the payload ran"


def test_a_released_shape_deepseek_v3_with_its_mtp_layer_converts_both_ways(tmp_path):
    """The user's route for a DeepSeek-V3 as released (low-rank q, YaRN, grouped routing, one
    MTP layer; `slime tiny-model --family deepseek_v3`): to a tensor-parallel 2 checkpoint and
    back gives identical tensors. Its multi-latent attention layers store their input norm under
    their own name, and the MTP layer's head is the output layer's tensor, written once each."""
    hf_dir, checkpoint, back = tmp_path / "hf", tmp_path / "megatron", tmp_path / "back"
    assert main(["tiny-model", str(hf_dir), "--family", "deepseek_v3", "--hidden-size", "32", "--num-layers", "2"]) == 0
    convert = ["convert", "hf-to-megatron", "--hf", str(hf_dir), "--out", str(checkpoint)]
    assert main([*convert, "--tensor-model-parallel-size", "2"]) == 0
    assert (
        main(["convert", "megatron-to-hf", "--load", str(checkpoint), "--hf-config", str(hf_dir), "--out", str(back)])
        == 0
    )
    original, converted = load_file(hf_dir / "model.safetensors"), load_file(back / "model.safetensors")
    assert "model.layers.2.shared_head.head.weight" in original  # the MTP layer
    assert sorted(converted) == sorted(original)
    assert [name for name in original if not torch.equal(converted[name], original[name])] == []
