"""Checkpoints: sharded model + optimizer (torch.distributed.checkpoint), written atomically.

Layout under ``--save DIR``::

    DIR/iter_0000003/            one checkpoint (after rollout 3)
        .metadata, __0_0.distcp  model and optimizer shards (DCP)
        rank_0.pt, rank_1.pt     per-rank scheduler state, RNG states, counters
    DIR/latest_checkpointed_iteration.txt   "3"

The directory layout and its atomic publishing are slime-core's (`slime_core.checkpoint_dir`),
shared with the Megatron backend.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist

from slime_core.checkpoint_dir import latest_checkpoint, prepare, publish, staging

__all__ = ["latest_checkpoint", "load_checkpoint", "save_checkpoint", "save_hf"]


def save_checkpoint(save_dir: str, rollout_id: int, model, optimizer, extra: dict) -> str:
    """Write the checkpoint of ``rollout_id``; every rank calls this. Returns its directory."""
    final, tmp = staging(save_dir, rollout_id)
    if dist.get_rank() == 0:
        prepare(tmp)
    dist.barrier()
    import torch.distributed.checkpoint as dcp  # here, not at the top: the driver imports this module (~1 s less)
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(tmp))
    torch.save(extra, tmp / f"rank_{dist.get_rank()}.pt")
    dist.barrier()
    if dist.get_rank() == 0:
        publish(tmp, final, rollout_id)
    dist.barrier()
    return str(final)


def load_checkpoint(path: Path, model, optimizer) -> dict:
    """Restore model and optimizer in place from ``path``; returns this rank's extra state."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optim_state}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    rank_file = path / f"rank_{dist.get_rank()}.pt"
    if not rank_file.is_file():
        raise FileNotFoundError(f"{rank_file} is missing: the checkpoint was written with fewer ranks than this run has")
    return torch.load(rank_file, weights_only=False)


def save_hf(path: str, model, tokenizer) -> None:
    """A Hugging Face directory from the sharded model: gathered on rank 0, written there.

    Training turns the KV cache off in the model's config (`slime_fsdp.model.load_model`); the
    exported config has it on again, or ``generate`` on the exported model would recompute the
    whole sequence for every token."""
    import copy

    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from transformers import AutoModelForCausalLM

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        config = copy.deepcopy(model.config)
        config.use_cache = True
        with torch.device("meta"):
            plain = AutoModelForCausalLM.from_config(config)
        plain.load_state_dict(full, assign=True)
        plain.tie_weights()
        plain.save_pretrained(path)
        tokenizer.save_pretrained(path)
    dist.barrier()

