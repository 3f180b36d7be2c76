"""The CPU engine's ``/pull_weights`` on what the trainer's `DeltaPublisher` publishes: a local
copy follows full and delta versions byte for byte, an xor delta applies exactly once, an
overwrite delta may apply again, and a corrupt delta fails naming its tensor with nothing applied
(and, unconfirmed, makes the next version a full one the copy pulls)."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from slime_core.loop.delta_sync import DeltaPublisher
from slime_core.rank.weight_bucket import WeightBucket
from slime_core.weight_delta import delta_metadata, tensor_regions, version_dir
from slime_sglang.cpu_engine.pull_weights import VERSION_FILE, apply_delta, pull


def weights(seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "embed.weight": torch.randn(16, 8, generator=generator),
        "norm.weight": torch.ones(8, dtype=torch.bfloat16),
    }


def step(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A small update of the first tensor's first row only (the norm is unchanged)."""
    out = {name: t.clone() for name, t in tensors.items()}
    out["embed.weight"][0] += 1e-3
    return out


def publish(publisher: DeltaPublisher, tensors: dict[str, torch.Tensor]) -> int:
    return publisher.publish([WeightBucket.pack(list(tensors.items()))])


def local_tensors(local: Path) -> dict[str, torch.Tensor]:
    return {name: t for file in sorted(local.glob("*.safetensors")) for name, t in load_file(file).items()}


def assert_holds(local: Path, tensors: dict[str, torch.Tensor]) -> None:
    held = local_tensors(local)
    assert held.keys() == tensors.keys()
    assert all(torch.equal(held[name], tensors[name]) for name in tensors)


@pytest.mark.parametrize("encoding", ["xor", "overwrite"])
def test_a_local_copy_follows_full_then_delta_versions(tmp_path, encoding):
    source, local = tmp_path / "published", tmp_path / "local"
    publisher = DeltaPublisher(source, encoding, "xxh3-128")
    v1 = weights(0)
    pull(source, local, publish(publisher, v1), base=tmp_path / "unused")
    assert_holds(local, v1)
    publisher.confirm(1)
    v2 = step(v1)
    version = publish(publisher, v2)
    delta_files = list(version_dir(source, version).glob("*.safetensors"))
    assert publisher.written_bytes(version) < publisher.full_bytes  # only the changed row, compressed
    pull(source, local, version, base=tmp_path / "unused")
    assert_holds(local, v2)
    pull(source, local, version, base=tmp_path / "unused")  # the copy is at the version: nothing happens
    assert_holds(local, v2)
    assert len(delta_files) == 1 and set(local_tensors(local)) == set(v2)


def test_an_overwrite_delta_applies_again_and_an_xor_one_is_refused_twice(tmp_path):
    for encoding in ("overwrite", "xor"):
        source, local = tmp_path / encoding / "published", tmp_path / encoding / "local"
        publisher = DeltaPublisher(source, encoding, "adler32")
        pull(source, local, publish(publisher, weights(0)), base=tmp_path)
        publisher.confirm(1)
        v1_marker = (local / VERSION_FILE).read_text()
        v2 = step(weights(0))
        pull(source, local, publish(publisher, v2), base=tmp_path)
        (local / VERSION_FILE).write_text(v1_marker)  # as if the copy had not recorded the apply
        if encoding == "overwrite":
            apply_delta(version_dir(source, 2), local)
            assert_holds(local, v2)
        else:  # applying xor again would revert it: its checksum catches that
            with pytest.raises(ValueError, match="checksum mismatch in weight_v000002 .*embed.weight"):
                apply_delta(version_dir(source, 2), local)
            assert_holds(local, v2)


def test_a_corrupt_delta_names_the_tensor_and_applies_nothing(tmp_path):
    source, local = tmp_path / "published", tmp_path / "local"
    publisher = DeltaPublisher(source, "xor", "blake3")
    v1 = weights(0)
    pull(source, local, publish(publisher, v1), base=tmp_path)
    publisher.confirm(1)
    v2 = step(v1)
    v2["norm.weight"] += 1  # two tensors change; only the embedding's diff is corrupted below
    version = publish(publisher, v2)
    (delta,) = version_dir(source, version).glob("*.safetensors")
    data = bytearray(delta.read_bytes())
    start, end = tensor_regions(bytes(data))["embed.weight"]
    data[(start + end) // 2] ^= 0xFF  # a byte inside the embedding's compressed diff
    delta.write_bytes(bytes(data))
    before = {f.name: f.read_bytes() for f in local.iterdir()}
    with pytest.raises(ValueError, match=r"checksum mismatch in weight_v000002 for 1 tensor\(s\): embed.weight;"):
        pull(source, local, version, base=tmp_path)
    assert {f.name: f.read_bytes() for f in local.iterdir() if f.name in before} == before  # norm not applied
    assert_holds(local, v1)
    # unconfirmed, version 2 is not what the engines hold: the next version is full, and brings them level again
    v3 = step(v2)
    version = publish(publisher, v3)
    assert delta_metadata(version_dir(source, version)) is None
    pull(source, local, version, base=tmp_path)
    assert_holds(local, v3)
