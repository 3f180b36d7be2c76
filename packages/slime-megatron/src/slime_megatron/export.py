"""The trained weights in Hugging Face form: for the rollout engines (in buckets) and as a
Hugging Face directory (``--save-hf``)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def hf_weights(model, hf_config) -> list[tuple[str, torch.Tensor]] | None:
    """Every weight as ``(hf_name, full CPU tensor)`` on global rank 0, None elsewhere; every
    rank must call it. ``export_hf_weights`` gathers each pipeline stage's weights over its
    tensor/expert-parallel ranks; the stages' lists then go to the first stage."""
    from megatron.core import parallel_state

    from slime_megatron.models import export_hf_weights

    stage = list(export_hf_weights(model, hf_config))
    group = parallel_state.get_pipeline_model_parallel_group()
    first = dist.get_rank() == 0
    if dist.get_world_size(group) > 1:
        stages = [None] * dist.get_world_size(group) if first else None
        dist.gather_object(stage, stages, dst=parallel_state.get_pipeline_model_parallel_first_rank(), group=group)
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


def save_hf(path: str, model, hf_config, tokenizer) -> None:
    """A Hugging Face directory (config, weights, tokenizer), written by rank 0; every rank
    must call it."""
    from transformers import AutoModelForCausalLM

    state = hf_weights(model, hf_config)
    if state is not None:
        with torch.device("meta"):
            plain = AutoModelForCausalLM.from_config(hf_config)
        plain.load_state_dict(dict(state), assign=True, strict=False)  # a tied output layer is not exported
        plain.tie_weights()
        missing = [name for name, p in plain.named_parameters() if p.is_meta]
        assert not missing, f"export_hf_weights gave no tensor for {missing}"
        plain.save_pretrained(path)
        tokenizer.save_pretrained(path)
    dist.barrier()
