"""Checkpoints: sharded model + optimizer (torch.distributed.checkpoint), written atomically.

Layout under ``--save DIR``::

    DIR/iter_0000003/            one checkpoint (after rollout 3)
        .metadata, __0_0.distcp  model and optimizer shards (DCP)
        rank_0.pt, rank_1.pt     per-rank scheduler state, RNG states, counters
    DIR/latest_checkpointed_iteration.txt   "3"

The directory layout and its atomic, durable publishing are slime-core's
(`slime_core.checkpoint.directory`), shared with the Megatron backend; every file is read back
through allow-lists (`slime_core.checkpoint.safety`), so a checkpoint runs no code it carries.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist

from slime_core.checkpoint.directory import (
    CheckpointError,
    confirm_written,
    durable_file,
    latest_checkpoint,
    prepare,
    publish,
    staging,
)
from slime_core.checkpoint.safety import dcp_failures_raised, guarded_dcp_reads, load_torch_file

__all__ = ["latest_checkpoint", "load_checkpoint", "save_checkpoint", "save_hf"]


def save_checkpoint(save_dir: str, rollout_id: int, model, optimizer, extra: dict, adapter_only: bool = False) -> str:
    """Write the checkpoint of ``rollout_id``; every rank calls this. Returns its directory.
    ``adapter_only`` (LoRA): the trained parameters only, not the frozen base."""
    final, tmp = staging(save_dir, rollout_id)
    if dist.get_rank() == 0:
        prepare(tmp)
    dist.barrier()
    import torch.distributed.checkpoint as dcp  # here, not at the top: the driver imports this module (~1 s less)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    model_state, optim_state = get_state_dict(
        model, optimizer, options=StateDictOptions(ignore_frozen_params=adapter_only)
    )
    failure = None
    try:
        with dcp_failures_raised(f"writing {tmp}"):
            dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(tmp))
        with durable_file(tmp / f"rank_{dist.get_rank()}.pt") as file:
            torch.save(extra, file)
    except Exception as exc:  # noqa: BLE001 - every rank learns of it in confirm_written
        failure = exc
    confirm_written(tmp, failure)
    if dist.get_rank() == 0:
        publish(tmp, final, rollout_id)
    dist.barrier()
    return str(final)


def load_checkpoint(path: Path, model, optimizer, adapter_only: bool = False) -> dict:
    """Restore model and optimizer in place from ``path``; returns this rank's extra state.
    ``adapter_only``: as saved (`save_checkpoint`); the frozen base keeps its loaded weights."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

    guarded_dcp_reads()
    options = StateDictOptions(ignore_frozen_params=adapter_only, strict=not adapter_only)
    model_state, optim_state = get_state_dict(model, optimizer, options=options)
    state = {"model": model_state, "optimizer": optim_state}
    reader = dcp.FileSystemReader(str(path))
    with dcp_failures_raised(f"loading {path}"):
        _check_role(path, reader.read_metadata().state_dict_metadata, model_state)
        dcp.load(state, storage_reader=reader)
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"], options=options
    )
    rank_file = path / f"rank_{dist.get_rank()}.pt"
    if not rank_file.is_file():
        raise FileNotFoundError(
            f"{rank_file} is missing: the checkpoint was written with fewer ranks than this run has"
        )
    return load_torch_file(rank_file)


def _check_role(path: Path, stored, model_state) -> None:
    """Refuse a critic's checkpoint for the policy: what a PPO run of an earlier slime left in
    ``iter_*``, where its critic was saved over its policy."""
    if any(key.startswith("model.value_head.") for key in stored) and not any(
        key.startswith("value_head.") for key in model_state
    ):
        raise CheckpointError(
            f"{path} holds a PPO critic, not the policy: a PPO run of an earlier slime saved its "
            "critic over the policy there,\n  so this checkpoint has lost the policy and cannot be "
            "resumed; start again from --hf-checkpoint (drop --load)"
        )


def save_hf(path: str, model, tokenizer) -> None:
    """A Hugging Face directory from the sharded model: gathered on rank 0, written there with
    ``tokenizer`` (a vision-language model's processor, which writes its tokenizer too).

    Training turns the KV cache off in the model's config (`slime_fsdp.model.load_model`); the
    exported config has it on again, or ``generate`` on the exported model would recompute the
    whole sequence for every token."""
    import copy

    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        config = copy.deepcopy(model.config)
        config.use_cache = True
        vision = getattr(config, "vision_config", None) is not None
        with torch.device("meta"):
            plain = (AutoModelForImageTextToText if vision else AutoModelForCausalLM).from_config(config)
        plain.load_state_dict(full, assign=True)
        plain.tie_weights()
        plain.save_pretrained(path)
        tokenizer.save_pretrained(path)
    dist.barrier()
