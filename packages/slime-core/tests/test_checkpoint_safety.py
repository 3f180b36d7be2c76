"""Checkpoint files are read through allow-lists (`slime_core.checkpoint.safety`): a payload in a
distributed checkpoint's non-tensor item is refused, naming the file, the item and the type,
and never runs; what torch's own writers put in a checkpoint still loads. (A payload in
``.metadata`` or in a rank's extras: tests/faults/test_checkpoints.py, end to end.)"""

import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp

from slime_core.checkpoint.safety import UnsafeCheckpointError, dcp_failures_raised, guarded_dcp_reads, load_torch_file
from slime_core.testing import PicklePayload


def _save(state, path):
    with warnings.catch_warnings():  # one process, no group: torch says so
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(path), no_dist=True)


def _load(state, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with dcp_failures_raised(f"loading {path}"):
            dcp.load(state, checkpoint_id=str(path), no_dist=True)


def test_a_payload_in_a_non_tensor_item_is_refused_naming_the_file_item_and_type(tmp_path):
    """torch reads a DCP item that is not a tensor with ``torch.load(weights_only=False)``; the
    guard reads it with the allow-list instead."""
    marker = tmp_path / "payload-ran"
    _save({"weight": torch.ones(2), "hyper": {"lr": 0.1}, "extra": PicklePayload(marker)}, tmp_path / "ckpt")
    guarded_dcp_reads()
    state = {"weight": torch.zeros(2), "hyper": {"lr": 0.0}, "extra": None}
    try:
        with pytest.raises(
            UnsafeCheckpointError,
            match=r"__0_0.distcp \(its item extra\): refused to load it: it "
            r"names posix.system",
        ):
            _load(state, tmp_path / "ckpt")
    finally:
        assert not marker.exists(), "the payload ran"


def test_what_torch_writes_still_loads_through_the_allow_lists(tmp_path):
    """Tensors, the plain values an optimizer's param groups hold, and a rank's extras."""
    saved = {"weight": torch.arange(4.0), "groups": [{"lr": 0.1, "betas": (0.9, 0.99), "amsgrad": False, "name": None}]}
    _save(saved, tmp_path / "ckpt")
    guarded_dcp_reads()
    state = {"weight": torch.zeros(4), "groups": [{"lr": 0.0, "betas": (0.0, 0.0), "amsgrad": True, "name": ""}]}
    _load(state, tmp_path / "ckpt")
    assert torch.equal(state["weight"], saved["weight"]) and state["groups"] == saved["groups"]
    extras = {"rng": torch.get_rng_state(), "scheduler": {"last_epoch": 3, "_last_lr": [0.1]}, "rollout_id": 3}
    torch.save(extras, tmp_path / "rank_0.pt")
    loaded = load_torch_file(tmp_path / "rank_0.pt")
    assert torch.equal(loaded["rng"], extras["rng"]) and loaded["scheduler"] == extras["scheduler"]
