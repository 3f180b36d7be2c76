"""The trained weights in Hugging Face form: for the rollout engines (in buckets) and as a
Hugging Face directory (``--save-hf``)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def hf_weights(model, hf_config, with_mtp: bool = True) -> list[tuple[str, torch.Tensor]] | None:
    """Every weight (the multi-token prediction layers' too, unless ``with_mtp`` is False) as
    ``(hf_name, full CPU tensor)`` on global rank 0, None elsewhere; every rank must call it.
    ``export_hf_weights`` gathers each pipeline stage's weights over its tensor/expert-parallel
    ranks; then the stages of rank 0's pipeline send their lists to rank 0, its first stage
    (the other pipelines, of other tensor-parallel ranks or replicas, hold the same weights)."""
    from megatron.core import parallel_state

    from slime_megatron.models import export_hf_weights

    stage = list(export_hf_weights(model, hf_config, with_mtp))
    group = parallel_state.get_pipeline_model_parallel_group()
    first = dist.get_rank() == 0
    if dist.get_world_size(group) > 1:
        if 0 not in dist.get_process_group_ranks(group):
            return None
        stages = [None] * dist.get_world_size(group) if first else None
        dist.gather_object(stage, stages, dst=0, group=group)
        stage = [pair for part in stages or [] for pair in part]
    return stage if first else None


def buckets(pairs: list[tuple[str, torch.Tensor]], bucket_bytes: int) -> list[list[tuple[str, torch.Tensor]]]:
    """``pairs`` in order, cut into runs of about ``bucket_bytes``; a tensor larger than that
    is alone in its bucket."""
    out: list[list[tuple[str, torch.Tensor]]] = []
    size = 0
    for name, tensor in pairs:
        nbytes = tensor.numel() * tensor.element_size()
        if not out or (size and size + nbytes > bucket_bytes):
            out.append([])
            size = 0
        out[-1].append((name, tensor))
        size += nbytes
    return out


def save_hf(path: str, model, hf_config, tokenizer, with_mtp: bool = True) -> None:
    """A Hugging Face directory (config, weights, tokenizer), written by rank 0; every rank
    must call it. The weights are written as exported, under checkpoint names (MoE experts one
    by one, a tied output layer left out), in ``save_pretrained``'s files and index: the
    layout of the checkpoint they came from, multi-token prediction layers included unless
    ``with_mtp`` is False (transformers' model would drop those)."""
    state = hf_weights(model, hf_config, with_mtp)
    if state is not None:
        save_safetensors(path, dict(state))
        hf_config.save_pretrained(path)
        tokenizer.save_pretrained(path)
    dist.barrier()


def save_safetensors(path: str, tensors: dict[str, torch.Tensor]) -> None:
    """``tensors`` in ``model.safetensors``, or in 5 GB shards with ``model.safetensors.index.json``
    (``--save-hf``, ``slime convert megatron-to-hf``). A tensor that is another's memory (an MTP
    layer's ``shared_head.head``, read from the output layer) is written as a copy: safetensors
    refuses shared tensors."""
    import json
    from pathlib import Path

    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    Path(path).mkdir(parents=True, exist_ok=True)
    tensors = _unshared(tensors)
    split = split_torch_state_dict_into_shards(tensors)
    for filename, names in split.filename_to_tensors.items():
        save_file({name: tensors[name] for name in names}, str(Path(path) / filename), metadata={"format": "pt"})
    if split.is_sharded:
        index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
        (Path(path) / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def _unshared(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each tensor contiguous, and a copy where an earlier one starts at the same memory."""
    seen: set[int] = set()
    unshared = {}
    for name, tensor in tensors.items():
        tensor = tensor.contiguous()
        unshared[name] = tensor.clone() if tensor.data_ptr() in seen else tensor
        seen.add(tensor.data_ptr())
    return unshared
