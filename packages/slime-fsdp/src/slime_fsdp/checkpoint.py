"""Checkpoints: sharded model + optimizer (torch.distributed.checkpoint), written atomically.

Layout under ``--save DIR``::

    DIR/iter_0000003/            one checkpoint (after rollout 3)
        .metadata, __0_0.distcp  model and optimizer shards (DCP)
        rank_0.pt, rank_1.pt     per-rank scheduler state, RNG states, counters
    DIR/latest_checkpointed_iteration.txt   "3"

A checkpoint is written into ``iter_0000003.tmp`` and renamed once every rank has finished,
and the ``latest`` file is replaced after that, so a crash mid-save never leaves a
directory that looks complete: ``--load`` follows the ``latest`` file only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

LATEST = "latest_checkpointed_iteration.txt"


def save_checkpoint(save_dir: str, rollout_id: int, model, optimizer, extra: dict) -> str:
    """Write the checkpoint of ``rollout_id``; every rank calls this. Returns its directory."""
    final = Path(save_dir) / f"iter_{rollout_id:07d}"
    tmp = final.with_name(final.name + ".tmp")
    if dist.get_rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier()
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(tmp))
    torch.save(extra, tmp / f"rank_{dist.get_rank()}.pt")
    dist.barrier()
    if dist.get_rank() == 0:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        _write_atomically(Path(save_dir) / LATEST, str(rollout_id))
    dist.barrier()
    return str(final)


def latest_checkpoint(load_dir: str) -> Path | None:
    """The newest complete checkpoint under ``load_dir``; None if it holds none yet.

    A ``--load`` directory that does not exist is an error (a typo must not silently start
    a fresh run).
    """
    directory = Path(load_dir)
    if not directory.is_dir():
        raise FileNotFoundError(
            f"--load {load_dir}: the directory does not exist; give the --save directory of an earlier run, "
            "or drop --load to start from --hf-checkpoint"
        )
    latest = directory / LATEST
    if not latest.is_file():
        return None
    path = directory / f"iter_{int(latest.read_text().strip()):07d}"
    if not path.is_dir():
        raise FileNotFoundError(f"{latest} names {path.name}, which is missing; the checkpoint directory was changed by hand")
    return path


def load_checkpoint(path: Path, model, optimizer) -> dict:
    """Restore model and optimizer in place from ``path``; returns this rank's extra state."""
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optim_state}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    rank_file = path / f"rank_{dist.get_rank()}.pt"
    if not rank_file.is_file():
        raise FileNotFoundError(f"{rank_file} is missing: the checkpoint was written with fewer ranks than this run has")
    return torch.load(rank_file, weights_only=False)


def save_hf(path: str, model, tokenizer) -> None:
    """A Hugging Face directory from the sharded model: gathered on rank 0, written there."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from transformers import AutoModelForCausalLM

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        with torch.device("meta"):
            plain = AutoModelForCausalLM.from_config(model.config)
        plain.load_state_dict(full, assign=True)
        plain.tie_weights()
        plain.save_pretrained(path)
        tokenizer.save_pretrained(path)
    dist.barrier()


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
